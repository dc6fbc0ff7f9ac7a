"""The in-process backend: NO ISOLATION, for unit tests only (``codemode.testing.in_process_sandbox``).

A program runs in a thread of the host's own process, with every right the host has: it can read
and write anything the host can, and a crash or ``os._exit`` in it ends the host. No
configuration and no command selects this backend; only a test passes it to
:class:`~codemode.CodeMode` (``sandbox_backend=``) or :class:`~codemode.sandbox.SandboxManager`.

What it is for: tests of ``CodeMode.run`` that start no process and need no Docker, yet exercise
the real host side. The host prepares the channel as for any backend (a real Unix socket and
one-time secret); the thread runs the real in-sandbox runtime (its ``_embedded`` entry point),
which connects, says hello and answers ``run`` requests with the same program-execution code a
sandbox runs. So the channel, the broker and its gates, and the ledger see exactly what they see
with a real sandbox.

Limits: the wall-time limit holds (the host stops waiting and closes the channel; a program
still running keeps its thread, abandoned, until it ends); memory, CPU, process and file limits
do not exist. Output written through ``sys.stdout`` / ``sys.stderr`` by the program is captured;
``os.write(1, …)`` and child processes are not (see the runtime's ``_embedded`` module).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import anyio

from codemode.config import SandboxConfig
from codemode.errors import SandboxError
from codemode.sandbox._backend import Launch, SandboxInstance, Termination
from codemode.sandbox._files import RUNTIME_PACKAGE, install_runtime
from codemode.sandbox._outcome import BackendName
from codemode.sandbox._state import StateDir
from codemode.sandbox._usage_meter import NoMeter, UsageMeter

__all__ = ["ISOLATION", "InProcessBackend", "InProcessSandbox", "load_runtime"]

log = logging.getLogger("codemode.sandbox.in_process")

ISOLATION = (
    "in-process test backend: NO ISOLATION, programs run in a thread of the host process with "
    "all of its rights; no memory, CPU or process limits (codemode.testing only)"
)
JOIN_S = 1.0
"""How long destroying a sandbox waits for its thread (a program still running is abandoned)."""

_load_lock = threading.Lock()

Serve = Callable[[str], None]


def load_runtime(runtime_dir: Path) -> Serve:
    """The runtime's in-process entry point, importing the runtime staged in ``runtime_dir``.

    The runtime becomes the ``codemode_runtime`` package of this process (once: later calls reuse
    it), since stubs import it under that name.
    """
    with _load_lock:
        if RUNTIME_PACKAGE not in sys.modules:
            package_dir = runtime_dir / RUNTIME_PACKAGE
            spec = importlib.util.spec_from_file_location(
                RUNTIME_PACKAGE, package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
            )
            if spec is None or spec.loader is None:
                raise SandboxError(f"cannot import the sandbox runtime from {package_dir}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[RUNTIME_PACKAGE] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[RUNTIME_PACKAGE]
                raise
        embedded = importlib.import_module(f"{RUNTIME_PACKAGE}._embedded")
    serve: Serve = embedded.serve_in_process
    return serve


class _RuntimeThread(threading.Thread):
    """Runs one sandbox's runtime; remembers why it stopped, if it failed."""

    def __init__(self, serve: Serve, channel_dir: Path, sandbox_id: str) -> None:
        # A daemon: an abandoned program must not keep the test process from exiting.
        super().__init__(name=f"codemode-in-process-{sandbox_id}", daemon=True)
        self._serve = serve
        self._channel_dir = channel_dir
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._serve(str(self._channel_dir))
        except BaseException as exc:
            self.error = exc


class InProcessBackend:
    """Serves each sandbox from a thread of this process (see the module docstring: no isolation)."""

    def __init__(self, config: SandboxConfig, state: StateDir) -> None:
        self._config = config
        self._state = state
        self._serve: Serve | None = None

    @property
    def name(self) -> BackendName:
        return "in_process"

    def isolation(self) -> str:
        return ISOLATION

    async def prepare(self) -> None:
        self._state.ensure()
        runtime_dir = await anyio.to_thread.run_sync(install_runtime, self._state.base)
        self._serve = await anyio.to_thread.run_sync(load_runtime, runtime_dir)
        await anyio.to_thread.run_sync(self._cleanup_orphans)

    def _cleanup_orphans(self) -> None:
        """Directories of in-process sandboxes whose host died (nothing else of them survives it)."""
        for root, meta in self._state.orphans():
            if meta.get("backend") == self.name:
                self._state.remove(root)

    def new_launch(self) -> Launch:
        sandbox_id, root = self._state.new_sandbox(self.name)
        return Launch(sandbox_id=sandbox_id, root=root, channel_dir=root / "ch", owner=None)

    async def spawn(self, launch: Launch) -> SandboxInstance:
        if self._serve is None:
            raise SandboxError(f"{type(self).__name__}.prepare() was not awaited")
        thread = _RuntimeThread(self._serve, launch.channel_dir, launch.sandbox_id)
        thread.start()
        return InProcessSandbox(launch.sandbox_id, thread)


class InProcessSandbox:
    def __init__(self, sandbox_id: str, thread: _RuntimeThread) -> None:
        self._sandbox_id = sandbox_id
        self._thread = thread

    @property
    def sandbox_id(self) -> str:
        return self._sandbox_id

    @property
    def meter(self) -> UsageMeter:
        # A thread of the host's own process: nothing of its CPU or memory is the run's alone.
        return NoMeter()

    async def watch(self) -> Termination:
        # This backend enforces no limit of its own (the host enforces wall time).
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    def _stopped(self) -> str:
        error = self._thread.error
        return f"{type(error).__name__}: {error}" if error is not None else "it returned"

    async def exit_reason(self) -> str | None:
        if self._thread.is_alive():
            return None
        return f"the in-process runtime stopped before connecting ({self._stopped()})"

    async def termination(self) -> Termination:
        await anyio.to_thread.run_sync(self._thread.join, JOIN_S)
        if self._thread.is_alive():
            return Termination("sandbox", "SandboxError", "the in-process runtime closed its channel")
        return Termination("sandbox", "SandboxError", f"the in-process runtime stopped ({self._stopped()})")

    async def destroy(self) -> None:
        # The host has closed the channel: the runtime's serve loop returns, unless a program is
        # still running, whose thread is then abandoned (Python cannot stop a thread).
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._thread.join, JOIN_S)
        if self._thread.is_alive():
            log.warning(
                "in-process sandbox %s: a program is still running; its thread is abandoned", self._sandbox_id
            )
