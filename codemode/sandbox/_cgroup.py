"""Kernel memory and process limits for local sandboxes: one cgroup per sandbox.

A cgroup charges every page a sandbox's processes bring into memory: resident memory, and also
memory no process has resident (memfds, shared memory, tmpfs files such as ``/dev/shm``, kernel
memory), with no gap between two looks of a watchdog. Where this host can make cgroups, the
process and bwrap backends put each sandbox in one of its own before it runs anything:

* cgroup v2 (``memory`` and ``pids`` controllers enabled for a directory we may write):
  ``memory.max`` = ``memory_mb``, ``memory.swap.max`` = 0, ``memory.oom.group`` = 1 (an OOM kill
  takes the whole sandbox), ``pids.max``;
* cgroup v1 (as root): ``memory.limit_in_bytes`` and, where swap is accounted,
  ``memory.memsw.limit_in_bytes`` (so no swap either) in the memory hierarchy, ``pids.max`` in
  the pids hierarchy, and a cgroup in the cpuacct hierarchy that limits nothing but counts the
  sandbox's CPU time (v2 counts it in every cgroup: ``cpu.stat``).

Each run's usage is read from these cgroups (:mod:`codemode.sandbox._usage_meter`), and from a
Docker container's own, which :func:`cgroup_of_process` finds.

Sandbox cgroups live in a ``codemode`` directory: under this process's own cgroup on v1 (so the
limits around this process bind the sandboxes too), and on v2 under the first of this process's
own cgroup, the hierarchy's root and this process's parent cgroup where the controllers can be
enabled (v2 forbids them in a cgroup that holds processes, such as our own).

The sandbox joins its cgroup itself, between ``fork`` and ``exec`` (``ChildPlan.cgroup_procs``),
so nothing it runs escapes the charge. It cannot leave or raise the limit: a bwrap sandbox sees
no ``/sys``, and a process sandbox on a root host runs as a uid that cannot write root's cgroup
files. A process sandbox without root runs as the user who owns the cgroup, so it never gets one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

__all__ = [
    "CGROUP_DIR",
    "Candidate",
    "CgroupHost",
    "CgroupPaths",
    "SandboxCgroup",
    "cgroup_of_process",
    "locate",
    "probe_cgroups",
]

CGROUP_DIR = "codemode"
"""The directory (in each parent below) that holds one cgroup per sandbox."""
CONTROLLERS = ("memory", "pids")
REMOVE_DEADLINE_S = 5.0
PARENT_ATTEMPTS = 10
_OCTAL = re.compile(r"\\([0-7]{3})")
"""Mount points in mountinfo escape spaces and other bytes as octal (``\\040``)."""


@dataclass(frozen=True)
class Candidate:
    """A place where sandbox cgroups could go (before it is known to work)."""

    version: Literal[1, 2]
    memory_parent: Path
    """v2: the cgroup under which ``codemode/`` goes; v1: this process's memory cgroup."""
    pids_parent: Path | None = None
    """v1 only: this process's cgroup in the pids hierarchy (None when that is not mounted)."""
    cpuacct_parent: Path | None = None
    """v1 only: this process's cgroup in the cpuacct hierarchy (None when that is not mounted)."""


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """``(root, mount point, fs type, super options)`` of every cgroup mount in ``mountinfo``."""
    found: list[tuple[str, str, str, set[str]]] = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = (_OCTAL.sub(lambda match: chr(int(match[1], 8)), field) for field in fields[3:5])
        found.append((root, point, tail[0], set(tail[2].split(","))))
    return found


def _own_paths(self_cgroup: str) -> tuple[str | None, dict[str, str]]:
    """This process's cgroup: ``(v2 path, {v1 controller: path})`` from ``/proc/self/cgroup``."""
    unified: str | None = None
    legacy: dict[str, str] = {}
    for line in self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            unified = path
        for controller in controllers.split(","):
            if controller:
                legacy[controller] = path
    return unified, legacy


def _inside(point: str, root: str, path: str) -> Path | None:
    """Where cgroup ``path`` is, given a mount of the hierarchy's ``root`` at ``point``."""
    if path != root and not path.startswith(root.rstrip("/") + "/"):
        return None  # the mount shows another part of the hierarchy
    relative = path[len(root) :].strip("/")
    return Path(point) / relative if relative else Path(point)


def _v1_path(
    mounts: list[tuple[str, str, str, set[str]]], own: dict[str, str], controller: str
) -> Path | None:
    """Where the cgroup ``own[controller]`` is in that controller's v1 hierarchy, if mounted."""
    mount = next((m for m in mounts if m[2] == "cgroup" and controller in m[3]), None)
    if mount is None or controller not in own:
        return None
    return _inside(mount[1], mount[0], own[controller])


def locate(mountinfo: str, self_cgroup: str) -> list[Candidate]:
    """Where sandbox cgroups could go, best first (pure: reads nothing itself).

    The memory controller decides the version: on a hybrid host it is bound to one hierarchy.
    """
    unified, legacy = _own_paths(self_cgroup)
    mounts = _mounts(mountinfo)
    v1_memory = next((m for m in mounts if m[2] == "cgroup" and "memory" in m[3]), None)
    if v1_memory is not None:
        if "memory" not in legacy:
            return []
        memory = _inside(v1_memory[1], v1_memory[0], legacy["memory"])
        pids, cpuacct = (_v1_path(mounts, legacy, controller) for controller in ("pids", "cpuacct"))
        return [Candidate(1, memory, pids, cpuacct)] if memory is not None else []
    v2 = next((m for m in mounts if m[2] == "cgroup2"), None)
    if v2 is None or unified is None:
        return []
    own = _inside(v2[1], v2[0], unified)
    top = Path(v2[1])
    ordered = [own, top, own.parent if own is not None and own != top else None]
    candidates: list[Candidate] = []
    for parent in ordered:
        if parent is not None and all(parent != c.memory_parent for c in candidates):
            candidates.append(Candidate(2, parent))
    return candidates


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace")


def _counter(path: Path, key: str) -> int:
    """A ``key value`` line of a flat-keyed cgroup file (0 when absent)."""
    with contextlib.suppress(OSError, ValueError):
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def _enable_controllers(directory: Path) -> None:
    """Make ``memory`` and ``pids`` available to ``directory``'s children (v2)."""
    enabled = set(_read(directory / "cgroup.subtree_control").split())
    missing = [name for name in CONTROLLERS if name not in enabled]
    if missing:
        _write(directory / "cgroup.subtree_control", " ".join(f"+{name}" for name in missing))


def _reason(exc: OSError) -> str:
    if exc.errno == errno.EBUSY:
        return "it holds processes, so cgroup v2 lets no controller through to its children"
    return exc.strerror or str(exc)


@dataclass(frozen=True)
class CgroupHost:
    """Where, and with which version, this host makes one cgroup per sandbox.

    The ``codemode`` directories exist only while they hold a sandbox (the last one out removes
    them; ``create`` makes them again).
    """

    version: Literal[1, 2]
    memory_dir: Path
    """The ``codemode`` directory holding sandbox cgroups (v2: for both controllers)."""
    pids_dir: Path | None
    """v1: the ``codemode`` directory in the pids hierarchy (None: pids left to the watchdog)."""
    swap_capped: bool
    """Whether swap is capped too (v2 always; v1 only with swap accounting)."""
    cpuacct_dir: Path | None = None
    """v1: the ``codemode`` directory in the cpuacct hierarchy (None: CPU read from ``/proc``)."""

    def describe(self) -> str:
        """What is enforced, for ``sandbox doctor`` and the backends' isolation sentence."""
        if self.version == 2:
            how = "memory.max, memory.swap.max = 0, pids.max"
        else:
            how = "memory.limit_in_bytes" + (" and memsw" if self.swap_capped else " (swap not capped)")
            how += ", pids.max" if self.pids_dir is not None else ", no pids hierarchy"
        return (
            f"kernel memory limit: a cgroup v{self.version} per sandbox under {self.memory_dir} ({how}); "
            "it counts resident memory, memfds, shared memory, tmpfs files and kernel memory, "
            "wherever they are held"
        )

    @property
    def parents(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.memory_dir, self.pids_dir, self.cpuacct_dir) if p is not None)

    def _ensure_parents(self) -> None:
        for parent in self.parents:
            # There already; or another sandbox's teardown is removing it right now (so `exist_ok`
            # would raise after all): then `_create` finds it gone and `create` makes it again.
            with contextlib.suppress(FileExistsError):
                parent.mkdir(mode=0o755)
        if self.version == 2:
            _enable_controllers(self.memory_dir)

    def create(self, name: str, memory_bytes: int, pids: int) -> SandboxCgroup:
        """Make the cgroup ``name`` with its limits (raises OSError; nothing is left behind)."""
        for _ in range(PARENT_ATTEMPTS - 1):
            self._ensure_parents()
            # FileNotFoundError: another host's last sandbox removed a parent between the two
            # steps, so make it again.
            with contextlib.suppress(FileNotFoundError):
                return self._create(name, memory_bytes, pids)
        self._ensure_parents()
        return self._create(name, memory_bytes, pids)

    def _create(self, name: str, memory_bytes: int, pids: int) -> SandboxCgroup:
        made: list[Path] = []
        try:
            memory = self.memory_dir / name
            memory.mkdir(mode=0o755)
            made.append(memory)
            if self.version == 2:
                _write(memory / "memory.max", str(memory_bytes))
                with contextlib.suppress(FileNotFoundError):  # a kernel without swap support
                    _write(memory / "memory.swap.max", "0")
                _write(memory / "memory.oom.group", "1")
                _write(memory / "pids.max", str(pids))
                return SandboxCgroup(2, (memory,))
            _write(memory / "memory.limit_in_bytes", str(memory_bytes))
            if self.swap_capped:
                _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))
            task_pids = cpu = None
            if self.pids_dir is not None:
                task_pids = self.pids_dir / name
                task_pids.mkdir(mode=0o755)
                made.append(task_pids)
                _write(task_pids / "pids.max", str(pids))
            if self.cpuacct_dir is not None:
                cpu = self.cpuacct_dir / name
                cpu.mkdir(mode=0o755)
                made.append(cpu)
            return SandboxCgroup(1, tuple(made), pids_dir=task_pids, cpu_dir=cpu)
        except OSError:
            for directory in reversed(made):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise


@dataclass(frozen=True)
class SandboxCgroup:
    """One sandbox's cgroup (one directory per hierarchy: one on v2, memory and pids on v1)."""

    version: Literal[1, 2]
    dirs: tuple[Path, ...]
    """The memory (or v2) directory first."""
    pids_dir: Path | None = None
    """v1: the one in the pids hierarchy (v2: the first directory holds every controller)."""
    cpu_dir: Path | None = None
    """v1: the one in the cpuacct hierarchy, which only counts CPU time."""

    def paths(self) -> CgroupPaths:
        """Where this sandbox's usage is read (see :class:`CgroupPaths`)."""
        if self.version == 2:
            return CgroupPaths(2, self.dirs[0], self.dirs[0], self.dirs[0])
        return CgroupPaths(1, self.dirs[0], self.cpu_dir, self.pids_dir)

    @classmethod
    def recorded(cls, meta: Mapping[str, object], name: str) -> SandboxCgroup | None:
        """The cgroup a sandbox's meta recorded (:meth:`record`), for removing it after its host
        died; None unless every directory is a sandbox cgroup named ``name``."""
        version, dirs = meta.get("cgroup_version"), meta.get("cgroup_dirs")
        if version not in (1, 2) or not isinstance(dirs, list) or not dirs:
            return None
        paths: list[Path] = []
        for entry in cast(list[object], dirs):
            if not isinstance(entry, str):
                return None
            path = Path(entry)
            if not path.is_absolute() or path.name != name or path.parent.name != CGROUP_DIR:
                return None
            paths.append(path)
        return cls(1 if version == 1 else 2, tuple(paths))

    def record(self) -> dict[str, object]:
        """What :meth:`recorded` takes back (kept in the sandbox's meta)."""
        return {"cgroup_version": self.version, "cgroup_dirs": [str(directory) for directory in self.dirs]}

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The files the sandbox's first process writes itself into before ``exec``."""
        return tuple(str(directory / "cgroup.procs") for directory in self.dirs)

    @property
    def limit_file(self) -> str:
        return "memory.max" if self.version == 2 else "memory.limit_in_bytes"

    def oom_kills(self) -> int:
        """Processes the kernel killed for this cgroup's memory limit so far."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _counter(self.dirs[0] / name, "oom_kill")

    def pids(self) -> list[int]:
        found: set[int] = set()
        for directory in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(line) for line in _read(directory / "cgroup.procs").split())
        return sorted(found)

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (``cgroup.kill`` where the kernel has it)."""
        with contextlib.suppress(OSError):
            _write(self.dirs[0] / "cgroup.kill", "1")
            return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> bool:
        """Kill what is left and remove the directories; False if one could not be removed.

        The shared ``codemode`` directories go too once no sandbox (of any host) is left in them,
        so this process's own cgroup is not left with a child that would stop whoever made it
        from removing it (v1 refuses to remove a cgroup that has children).
        """
        end = time.monotonic() + REMOVE_DEADLINE_S
        removed = True
        for directory in self.dirs:
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    # EBUSY: a process is still in it (a killed one leaves once it has exited).
                    if exc.errno != errno.EBUSY or time.monotonic() > end:
                        removed = False
                        break
                    self.kill()
                    time.sleep(0.01)
        for directory in self.dirs:
            with contextlib.suppress(OSError):  # another sandbox is in it, or it is gone already
                directory.parent.rmdir()
        return removed


def _can_join(procs_files: tuple[str, ...]) -> bool:
    """Whether a child of this process can move itself into a cgroup (as a sandbox will)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            for path in procs_files:
                _write(Path(path), "0")
        except OSError:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _host_for(candidate: Candidate) -> CgroupHost:
    parent = candidate.memory_parent
    if candidate.version == 2:
        available = set(_read(parent / "cgroup.controllers").split())
        if not set(CONTROLLERS) <= available:
            raise OSError(errno.ENOTSUP, f"controllers {' '.join(sorted(available)) or '(none)'} only")
        _enable_controllers(parent)
        return CgroupHost(2, parent / CGROUP_DIR, None, swap_capped=True)
    # Without pids, the watchdog and RLIMIT_NPROC count processes; without cpuacct, CPU time is
    # read from /proc.
    pids_dir, cpuacct_dir = (_shared_dir(p) for p in (candidate.pids_parent, candidate.cpuacct_parent))
    swap = (parent / "memory.memsw.limit_in_bytes").exists()
    return CgroupHost(1, parent / CGROUP_DIR, pids_dir, swap_capped=swap, cpuacct_dir=cpuacct_dir)


def _shared_dir(parent: Path | None) -> Path | None:
    """``parent``'s ``codemode`` directory, made if missing; None if there is none to be had."""
    if parent is None:
        return None
    try:
        (parent / CGROUP_DIR).mkdir(mode=0o755, exist_ok=True)
    except OSError:
        return None
    return parent / CGROUP_DIR


def _try(candidate: Candidate) -> CgroupHost:
    """Set up ``candidate`` and prove it with a throwaway sandbox cgroup (raises OSError)."""
    host = _host_for(candidate)
    try:
        probe = host.create(f"probe-{secrets.token_hex(6)}", 64 * 1024 * 1024, 8)
    except OSError:
        for parent in host.parents:
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise
    try:
        if not _can_join(probe.procs_files):
            raise OSError(errno.EACCES, "a child process cannot move itself into it")
    finally:
        probe.remove()
    return host


def probe_cgroups() -> tuple[CgroupHost | None, str]:
    """``(host, why)``: where sandbox cgroups go, or None with the reason none can be made."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
        self_cgroup = Path("/proc/self/cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, f"cannot read this process's cgroups: {exc}"
    candidates = locate(mountinfo, self_cgroup)
    if not candidates:
        return None, "no memory cgroup controller is mounted"
    problems: list[str] = []
    for candidate in candidates:
        try:
            host = _try(candidate)
        except OSError as exc:
            problems.append(f"{candidate.memory_parent}: {_reason(exc)}")
            continue
        return host, host.describe()
    return None, f"cannot make cgroup v{candidates[0].version} sandbox cgroups: " + "; ".join(problems)


@dataclass(frozen=True)
class CgroupPaths:
    """The cgroup directories that hold one sandbox's counters (a local sandbox's, a container's)."""

    version: Literal[1, 2]
    memory: Path
    cpu: Path | None
    """v1: its cpuacct directory (None when there is none); v2: the same directory."""
    pids: Path | None


def cgroup_of_process(pid: int, name: str) -> CgroupPaths | None:
    """The cgroup of process ``pid`` as this host sees it, if its memory cgroup is named ``name``.

    For a container the engine started: ``pid`` is its first process as the engine reports it,
    ``name`` its id. The name check is what makes this safe where the engine runs in another pid
    namespace (a remote engine, a host in a container): there the pid is some other process of
    ours, or none, and the answer is None rather than that process's cgroup.
    """
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
        listed = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    unified, legacy = _own_paths(listed)
    mounts = _mounts(mountinfo)
    if any(m[2] == "cgroup" and "memory" in m[3] for m in mounts):
        memory = _v1_path(mounts, legacy, "memory")
        if memory is None or name not in memory.name:
            return None
        return CgroupPaths(1, memory, _v1_path(mounts, legacy, "cpuacct"), _v1_path(mounts, legacy, "pids"))
    v2 = next((m for m in mounts if m[2] == "cgroup2"), None)
    where = _inside(v2[1], v2[0], unified) if v2 is not None and unified is not None else None
    if where is None or name not in where.name:
        return None
    return CgroupPaths(2, where, where, where)
