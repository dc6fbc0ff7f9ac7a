"""The runtime served from a thread of the host's own process: codemode.testing's in-process sandbox.

THIS IS NOT A SANDBOX. A program served here runs in the host process with all of its rights;
it exists so unit tests of ``CodeMode.run`` start no process and need no Docker, while the host
side (channel, broker, gates, ledger) is the real one. Nothing in a sandbox image calls it, and
no configuration can select it (only ``codemode.testing.in_process_sandbox`` does).

:func:`serve_in_process` speaks the same wire contract over the same Unix socket, with the
same program-execution code as :func:`_serve.serve`; what differs is what a real sandbox does to
its whole process, which here belongs to the host:

* the channel's end wakes the serve loop instead of calling ``os._exit``;
* the channel and the run state are bound to this thread's context (and copied into
  :func:`parallel` workers and asyncio tasks), not to the process, so several in-process
  sandboxes can share one interpreter;
* output is captured from ``sys.stdout`` / ``sys.stderr`` writes made in that context, not from
  file descriptors 1 and 2 (``os.write(1, …)``, child processes and threads the program starts
  itself write to the host's streams);
* the program's module is not registered as ``__main__``, ``import codemode`` is the host's
  package, and the environment is left alone;
* ``servers`` modules are fetched when executed rather than when found (see
  :class:`_DeferredLoader`), and dropped from ``sys.modules`` before a run so it imports its own
  stubs from its host, unless another run is going on: runs at the same time share them.
"""

from __future__ import annotations

import contextvars
import importlib.abc
import importlib.machinery
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

from . import _calls, _client
from ._capture import CappedBuffer, Capture, Session
from ._imports import HostLoader, fetch, filename_for
from ._serve import answer

_target: contextvars.ContextVar[tuple[_TextCapture, _TextCapture] | None] = contextvars.ContextVar(
    "codemode_capture", default=None
)
_lock = threading.Lock()
_running: set[_EmbeddedSession] = set()
"""Sessions whose program is running (or was abandoned at its wall-time limit and still runs)."""


class _TextCapture:
    """What a program wrote to one stream, up to ``cap`` bytes (UTF-8)."""

    def __init__(self, cap: int, on_finish: Callable[[], None]) -> None:
        self._buffer = CappedBuffer(cap)
        self._on_finish = on_finish

    def write(self, text: str) -> None:
        self._buffer.add(text.encode("utf-8", errors="replace"))

    def snapshot(self) -> tuple[str, bool]:
        return self._buffer.snapshot()

    def finish(self) -> tuple[str, bool]:
        if self._buffer.close():
            self._on_finish()
        return self._buffer.snapshot()


class _Router:
    """Stands in for ``sys.stdout`` (index 0) or ``sys.stderr`` (1) while programs run: a write
    from a program's context goes to its capture, any other to the stream it replaced."""

    def __init__(self, wrapped: Any, index: int) -> None:
        self._wrapped = wrapped
        self._index = index

    def write(self, text: str) -> int:
        captures = _target.get()
        if captures is None:
            return self._wrapped.write(text)
        captures[self._index].write(text)
        return len(text)

    def flush(self) -> None:
        if _target.get() is None:
            self._wrapped.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    @staticmethod
    def install() -> None:
        """Put routers in front of the current streams (a test runner may have replaced them)."""
        if not isinstance(sys.stdout, _Router):
            sys.stdout = _Router(sys.stdout, 0)
        if not isinstance(sys.stderr, _Router):
            sys.stderr = _Router(sys.stderr, 1)

    @staticmethod
    def remove() -> None:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if isinstance(stream, _Router):
                setattr(sys, name, stream._wrapped)  # pyright: ignore[reportPrivateUsage]


class _EmbeddedSession(Session):
    registers_main = False

    def __init__(self, channel: _client.Channel) -> None:
        self.channel = channel
        self._capturing = 0
        super().__init__()

    def begin(self, cap: int) -> tuple[Capture, Capture]:
        with _lock:
            # Each run imports its stubs from its own host; but the ``servers`` modules of a
            # run still going on elsewhere are left alone (removing them would break its
            # imports), so concurrent runs share them. An abandoned run does not count.
            if not any(not other.channel.closed for other in _running if other is not self):
                for name in [n for n in sys.modules if n == "servers" or n.startswith("servers.")]:
                    del sys.modules[name]
            _running.add(self)
            self._capturing = 2
            _Router.install()
        captures = (_TextCapture(cap, self._finished), _TextCapture(cap, self._finished))
        _target.set(captures)
        return captures

    def _finished(self) -> None:
        with _lock:
            self._capturing -= 1
            if self._capturing == 0:
                _running.discard(self)
                if not _running:
                    _Router.remove()


class _DeferredLoader(importlib.abc.Loader):
    """Asks the host for a ``servers`` module when executing it, not when finding it.

    Python calls a finder's ``find_spec`` holding the interpreter's global import lock; a real
    sandbox's :class:`ServersFinder` may wait for the host there, but here the host is in the
    same interpreter and answering may need an import of its own. ``exec_module`` runs under the
    module's own lock only.
    """

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__
        found = fetch(name)
        if found is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        source, is_package = found
        if is_package:
            module.__path__ = []
            if module.__spec__ is not None:
                module.__spec__.submodule_search_locations = []
        HostLoader(name, source, filename_for(name, is_package)).exec_module(module)


class _BoundFinder(importlib.abc.MetaPathFinder):
    """Finds ``servers`` modules for code running in a context bound to an in-process sandbox."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "servers" and not fullname.startswith("servers."):
            return None
        if _client.current() is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _DeferredLoader())


def _wake(channel: _client.Channel) -> None:
    channel.inbox.put(None)


def serve_in_process(directory: str) -> None:
    """Connect to the host's socket in ``directory`` and answer its runs from this thread, until
    the host closes the channel. A program still running then keeps this thread (Python cannot
    stop a thread); it ends when the program does."""
    with _lock:
        if not any(isinstance(finder, _BoundFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, _BoundFinder())
    channel = _client.connect(directory, on_close=_wake)
    _client.bind(channel)
    _calls.bind_run_state(_calls.RunState())
    try:
        answer(channel, _EmbeddedSession(channel))
    except OSError:
        pass  # the host closed the channel while a reply was on its way
    finally:
        channel.sock.close()
