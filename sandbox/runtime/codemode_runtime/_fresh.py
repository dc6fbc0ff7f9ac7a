"""Starting a run clean in a sandbox that served another run before (a batch worker's session).

A fresh run (``fresh`` in its request: every batch item, every verify program) must find nothing
of the runs before it: no file in the sandbox's scratch directories (``/tmp``, ``/dev/shm``, the
working directory), no process they started, no module they imported or changed, no environment
variable they set. A new sandbox per item would give that too, at the cost of a cold start per
item; resetting this one costs a millisecond or so.

What the runtime cannot undo it does not pretend to: a thread still running is counted as left
over (``_program._still_running``) and the host discards the sandbox, as it always has.

Processes: the runtime makes itself a child subreaper, so a process its program started stays
its descendant even when its parent exits (a double fork, ``setsid``); every descendant is killed
when a fresh run ends and again before the next one starts. Without a subreaper (the kernel
refused) an orphan would be reparented outside the runtime's tree, so a fresh run is refused.
"""

from __future__ import annotations

import builtins
import itertools
import operator
import os
import signal
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

from . import _wire as wire

_PR_SET_CHILD_SUBREAPER = 36
_KILL_ROUNDS = 50
"""How often the runtime lists its descendants and kills them before it gives up (a process that
forks faster than it is killed): the run is then refused and the host discards the sandbox."""
_REAP_S = 0.5
"""How long the runtime waits for a killed child to become reapable (SIGKILL is not instant for a
process inside a system call); one not reaped by then is looked at again in the next round."""
_OWN_PACKAGES = ("codemode_runtime", "codemode")
"""Modules whose state is the runtime's own (the channel, the run state): never rolled back."""


class ResetError(Exception):
    """The sandbox could not be made clean: the run must not start in it."""


def _set_subreaper() -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError, ImportError):
        return False


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as listing:
                out += [int(child) for child in listing.read().split()]
        except (OSError, ValueError):
            continue
    return out


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = _children(pid)
    while todo:
        child = todo.pop()
        if child in found:
            continue
        found.append(child)
        todo += _children(child)
    return found


def kill_descendants() -> bool:
    """Kill every process below this one and reap what comes back to it; whether none is left."""
    me = os.getpid()
    for _ in range(_KILL_ROUNDS):
        everyone = _descendants(me)
        if not everyone:
            return True
        for pid in everyone:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        # Direct children (and, through the subreaper, orphans of killed parents) are reaped here;
        # a zombie would otherwise stay listed as a child for ever. Only the ones just killed,
        # and never blocking: a child forked after the listing (by a thread) would not die, and a
        # blocking wait on it would hang the runtime; the next round lists and kills it.
        killed = set(everyone)
        for pid in _children(me):
            if pid in killed:
                _reap(pid)
    return not _descendants(me)


def _reap(pid: int) -> None:
    deadline = time.monotonic() + _REAP_S
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.001)


def _lists_children() -> bool:
    """Whether the kernel lists a task's children (``CONFIG_PROC_CHILDREN``): without it every
    listing is empty, and a reset would find no process left when some are."""
    me = os.getpid()
    return os.path.exists(f"/proc/{me}/task/{me}/children")


def _empty(directory: str) -> None:
    """Remove what ``directory`` holds, not the directory itself (a mount point, or the cwd)."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _remove_tree(entry.path)
        else:
            os.unlink(entry.path)


def _remove_tree(path: str) -> None:
    # A program may take away its own write or read permission on a directory (``chmod 500``),
    # which would stop ``shutil.rmtree``; the sandbox user owns it, so it can give them back.
    os.chmod(path, 0o700)
    for entry in list(os.scandir(path)):
        if entry.is_dir(follow_symlinks=False):
            _remove_tree(entry.path)
        else:
            os.unlink(entry.path)
    os.rmdir(path)


class Baseline:
    """The interpreter and the sandbox as they were before the first program ran."""

    def __init__(self, scratch: list[str]) -> None:
        self.scratch = scratch
        self.reaps = _set_subreaper() and _lists_children()
        self.cwd = os.getcwd()
        self.modules = dict(sys.modules)
        self.attributes = {
            name: _Namespace(vars(module))
            for name, module in self.modules.items()
            if _restorable(name, module)
        }
        self._namespaces = [vars(self.modules[name]) for name in self.attributes]
        self._keys = list(_all_keys(self._namespaces))
        self._values = list(_all_values(self._namespaces))
        self.path = list(sys.path)
        self.meta_path = list(sys.meta_path)
        self.path_hooks = list(sys.path_hooks)
        self.importer_cache = dict(sys.path_importer_cache)
        self.environ = dict(os.environ)
        self.handlers = {number: signal.getsignal(number) for number in signal.valid_signals()}

    def end_of_run(self) -> None:
        """A fresh run ended: its processes end with it (they would act in the next run)."""
        kill_descendants()

    def reset(self) -> None:
        """Make the sandbox as it was before any program ran (raises :class:`ResetError`)."""
        if not self.reaps:
            raise ResetError(
                "this sandbox cannot keep its programs' processes in its own tree (prctl "
                "PR_SET_CHILD_SUBREAPER was refused, or the kernel does not list a process's "
                "children in /proc), so it cannot start a run clean"
            )
        if not kill_descendants():
            raise ResetError("processes left by an earlier run could not all be killed")
        os.chdir(self.cwd)
        for directory in self.scratch:
            try:
                _empty(directory)
            except OSError as exc:
                raise ResetError(f"the scratch directory {directory} could not be emptied: {exc}") from exc
        self._restore_modules()
        sys.path[:] = self.path
        sys.meta_path[:] = self.meta_path
        sys.path_hooks[:] = self.path_hooks
        for key in [key for key in sys.path_importer_cache if key not in self.importer_cache]:
            del sys.path_importer_cache[key]
        sys.path_importer_cache.update(self.importer_cache)
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        for number, handler in self.handlers.items():
            current = signal.getsignal(number)
            if current is not handler and handler is not None:
                try:
                    signal.signal(number, handler)
                except (OSError, ValueError):
                    continue

    def _restore_modules(self) -> None:
        for name in [name for name in sys.modules if name not in self.modules and not _kept(name)]:
            del sys.modules[name]
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
        # Attributes the runs set on modules that were there before them: added ones go, changed
        # ones get their old value back (``json.dumps = ...``, ``builtins.print = ...``).
        # All at once first, in C (the same test as _Namespace.unchanged): nearly always, no run
        # touched any of these modules.
        namespaces = self._namespaces
        if list(_all_keys(namespaces)) != self._keys or not all(
            map(operator.is_, _all_values(namespaces), self._values)
        ):
            for name, saved in self.attributes.items():
                saved.restore(vars(self.modules[name]))
        for name in [name for name in _host_modules if name not in sys.modules]:
            del _host_modules[name]
        for name, (module, saved) in _host_modules.items():
            # A package's submodules are attributes set after it ran: kept while they are.
            saved.restore(vars(module), package=name)


_host_modules: dict[str, tuple[types.ModuleType, _Namespace]] = {}
"""Stub and skill modules as the host's source made them (see :func:`remember`)."""


def remember(module: types.ModuleType) -> None:
    """A module from the host (``servers.crm``) has just run its source: fresh runs keep it, put
    back as it is now, instead of fetching and compiling it again for every batch item."""
    known = _host_modules.get(module.__name__)
    if known is None or known[0] is not module:  # a reload keeps what the first run made
        _host_modules[module.__name__] = (module, _Namespace(vars(module)))


def _kept(name: str) -> bool:
    known = _host_modules.get(name)
    return known is not None and sys.modules.get(name) is known[0]


_MISSING = object()


def _all_keys(namespaces: list[dict[str, Any]]) -> Iterator[str]:
    return itertools.chain.from_iterable(namespace.keys() for namespace in namespaces)


def _all_values(namespaces: list[dict[str, Any]]) -> Iterator[Any]:
    return itertools.chain.from_iterable(namespace.values() for namespace in namespaces)


class _Namespace:
    """A module's attributes as they were, and a quick test that they still are."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.items = dict(namespace)
        self.keys = list(namespace)
        self.values = list(namespace.values())

    def unchanged(self, namespace: dict[str, Any]) -> bool:
        # A dict keeps its keys' order and a key set again keeps its place, so equal key lists
        # and identical values in order mean nothing was added, removed or set. Compared in C:
        # the runtime holds some 150 modules with thousands of attributes between them.
        return list(namespace) == self.keys and all(map(operator.is_, namespace.values(), self.values))

    def restore(self, namespace: dict[str, Any], *, package: str | None = None) -> None:
        """Added attributes go, changed ones get their value back. ``package``: the module is that
        package, whose submodules still imported stay its attributes."""
        if self.unchanged(namespace):
            return
        for key in [key for key in namespace if key not in self.items]:
            if package is None or sys.modules.get(f"{package}.{key}", _MISSING) is not namespace[key]:
                del namespace[key]
        for key, value in self.items.items():
            if namespace.get(key, _MISSING) is not value:
                namespace[key] = value


def _restorable(name: str, module: Any) -> bool:
    if not isinstance(module, types.ModuleType) or name in ("__main__", "sys"):
        return False
    if module is builtins:
        return True
    return name.split(".")[0] not in _OWN_PACKAGES


def scratch_dirs() -> list[str]:
    """The directories the backend says are this sandbox's own to empty (``$CODEMODE_SCRATCH_DIRS``)."""
    value = os.environ.get(wire.SCRATCH_DIRS_ENV, "")
    return [path for path in value.split(os.pathsep) if os.path.isabs(path)]
