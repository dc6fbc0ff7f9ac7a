"""The process and bwrap backends' watchdog: a sandbox's processes, their memory, killing them.

Without cgroups, rlimits bound each process on its own (RLIMIT_AS is per process, RLIMIT_NPROC
binds only a non-root uid); the watchdog adds the totals: the number of processes, and the memory
the sandbox holds, which is more than what is resident in its processes:

* resident memory (anonymous and file-backed pages) summed over the processes;
* shared memory objects on the kernel's internal tmpfs (memfds, shared anonymous mappings,
  System V segments) held by a descriptor or a mapping, each counted once at its allocated size
  (unmapped pages included): RSS misses a memfd that is written but not mapped, or one whose
  mapping was touched only by a process that has exited;
* the used space of the sandbox's private tmpfs mounts (``/tmp``, ``/dev/shm``), where files
  hold memory after every descriptor is closed.

Mapped shared pages (``RssShmem``) are left out of the resident sum: each belongs to one of the
last two kinds, so it is counted there once. A mapping the host cannot size (``map_files`` needs
root) counts at its extent. What this cannot see: a descriptor in flight in a Unix socket and
System V segments nobody maps; with a cgroup (:mod:`codemode.sandbox._cgroup`) the kernel counts
those too, and this measurement is not used.

A sandbox's processes are found by its private uid when the host is root (a double fork or
``setsid`` cannot hide them), otherwise by its process tree and session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

import psutil

__all__ = ["Members", "Sample", "kill_members", "sample"]

PRIVATE_TMPFS = ("tmp", "dev/shm")
"""Where a sandbox with its own mount namespace has its tmpfs mounts (relative to its root)."""


def _internal_shm_dev() -> int | None:
    """The device of the kernel's internal tmpfs, which backs memfds, shared anonymous mappings
    and System V segments alike (learnt from a memfd of our own)."""
    try:
        fd = os.memfd_create("codemode-shm-probe")
    except (OSError, AttributeError):
        return None
    try:
        return os.fstat(fd).st_dev
    finally:
        os.close(fd)


def _own_mount_ns() -> int | None:
    try:
        return os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return None


SHM_DEV = _internal_shm_dev()
HOST_MOUNT_NS = _own_mount_ns()


@dataclass(frozen=True)
class Members:
    """How to find a sandbox's processes."""

    leader: int
    uid: int | None = None
    """The sandbox's private uid (root host): every process with it belongs to the sandbox."""


@dataclass(frozen=True)
class Sample:
    pids: tuple[int, ...]
    rss: int
    """Resident anonymous and file-backed memory, summed over the processes."""
    shared: int = 0
    """memfds, shared anonymous memory and System V segments the processes hold (each once)."""
    tmpfs: int = 0
    """Bytes used in the sandbox's private tmpfs mounts."""

    @property
    def memory(self) -> int:
        return self.rss + self.shared + self.tmpfs


def _find(members: Members) -> list[int]:
    """The sandbox's pids (some may have exited since: :func:`sample` drops those)."""
    if members.uid is not None:
        return _pids_of_uid(members.uid)
    try:
        leader = psutil.Process(members.leader)
        pids = [leader.pid, *(child.pid for child in leader.children(recursive=True))]
    except psutil.Error:
        pids = []
    # Processes that left the tree but not the session (double fork without setsid).
    with contextlib.suppress(psutil.Error, OSError):
        sid = os.getsid(members.leader)
        known = set(pids)
        for pid in psutil.pids():
            with contextlib.suppress(OSError):
                if pid not in known and os.getsid(pid) == sid:
                    pids.append(pid)
    return pids


def _pids_of_uid(uid: int) -> list[int]:
    """The processes running as ``uid``, from the owner of each ``/proc/<pid>`` directory.

    One ``stat`` per process instead of reading and parsing its status file: the scan runs
    every 100 ms for every busy sandbox, and was the host's largest cost in a batch job. The
    directory belongs to the effective uid; a process that changes only its real uid away
    from the sandbox's would be missed, but a sandbox uid cannot change uids (no privileges).
    """
    found: list[int] = []
    with contextlib.suppress(OSError), os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        found.append(int(entry.name))
    return found


def _status(pid: int) -> tuple[bool, int] | None:
    """``(zombie, resident anonymous + file-backed bytes)`` from ``/proc/<pid>/status``."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            text = handle.read()
    except OSError:
        return None  # exited since the scan
    zombie = False
    resident = 0
    for line in text.splitlines():
        if line.startswith(b"State:"):
            zombie = line.split()[1:2] == [b"Z"]
        elif line.startswith((b"RssAnon:", b"RssFile:")):
            resident += int(line.split()[1]) * 1024
    return zombie, resident


@dataclass
class _Holdings:
    """Shared memory objects and private tmpfs mounts found so far in one sample."""

    objects: dict[tuple[int, int], int]
    """(device, inode) -> allocated bytes (or a mapping's extent when it cannot be sized)."""
    tmpfs: dict[int, int]
    """device -> used bytes of a private tmpfs."""
    namespaces: set[int]
    """Mount namespaces already looked into."""


def _descriptors(pid: int, shm_dev: int, found: _Holdings) -> None:
    with contextlib.suppress(OSError):
        for name in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{pid}/fd/{name}")  # the open file itself, not the link
                if st.st_dev == shm_dev:
                    found.objects[(st.st_dev, st.st_ino)] = st.st_blocks * 512


def _mappings(pid: int, shm_dev: int, found: _Holdings) -> None:
    device = f"{os.major(shm_dev):02x}:{os.minor(shm_dev):02x}".encode()
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or fields[3] != device:
            continue
        key = (shm_dev, int(fields[4]))
        if key in found.objects:
            continue  # sized already (through a descriptor or an earlier mapping)
        span = fields[0].decode()
        try:
            found.objects[key] = os.stat(f"/proc/{pid}/map_files/{span}").st_blocks * 512
        except OSError:  # map_files needs root: the extent is what this process can reach
            start, _, end = span.partition("-")
            found.objects[key] = int(end, 16) - int(start, 16)


def _private_tmpfs(pid: int, found: _Holdings) -> None:
    try:
        namespace = os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return
    if namespace == HOST_MOUNT_NS or namespace in found.namespaces:
        return  # the host's own /tmp is not the sandbox's memory (nor is it writable there)
    found.namespaces.add(namespace)
    for relative in PRIVATE_TMPFS:
        path = f"/proc/{pid}/root/{relative}"
        with contextlib.suppress(OSError):
            device = os.stat(path).st_dev
            if device not in found.tmpfs:
                usage = os.statvfs(path)
                found.tmpfs[device] = (usage.f_blocks - usage.f_bfree) * usage.f_frsize


def sample(members: Members, *, memory: bool = True) -> Sample:
    """The sandbox's live processes and (``memory``) what they hold; see the module docstring."""
    pids: list[int] = []
    rss = 0
    found = _Holdings({}, {}, set())
    for pid in _find(members):
        status = _status(pid)
        if status is None or status[0]:
            continue
        pids.append(pid)
        if not memory:
            continue
        rss += status[1]
        if SHM_DEV is not None:
            _descriptors(pid, SHM_DEV, found)
            _mappings(pid, SHM_DEV, found)
        _private_tmpfs(pid, found)
    return Sample(tuple(pids), rss, sum(found.objects.values()), sum(found.tmpfs.values()))


def _kill_uid(uid: int) -> None:
    """``kill(-1, SIGKILL)`` as the sandbox's uid: every process of that uid, atomically."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def kill_members(members: Members, *, deadline_s: float = 5.0) -> bool:
    """Kill every process of the sandbox; return True once none is left (zombies aside)."""
    end = time.monotonic() + deadline_s
    while True:
        if members.uid is not None:
            _kill_uid(members.uid)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(members.leader, signal.SIGKILL)
        left = sample(members, memory=False).pids
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not left:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
