"""psutil-based limits for the process backend: memory across processes, process count, killing.

Without cgroups, rlimits bound each process on its own (RLIMIT_AS is per process, RLIMIT_NPROC
binds only a non-root uid); the watchdog adds the totals: resident memory summed over every
process of the sandbox, and the number of processes. A sandbox's processes are found by its
private uid when the host is root (a double fork or ``setsid`` cannot hide them), otherwise by
its process tree and session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

import psutil

__all__ = ["Members", "Sample", "kill_members", "sample"]


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


def _find(members: Members) -> list[psutil.Process]:
    if members.uid is not None:
        found: list[psutil.Process] = []
        for pid in _pids_of_uid(members.uid):
            with contextlib.suppress(psutil.Error):  # it may have exited since the scan
                found.append(psutil.Process(pid))
        return found
    try:
        leader = psutil.Process(members.leader)
        procs = [leader, *leader.children(recursive=True)]
    except psutil.Error:
        procs = []
    # Processes that left the tree but not the session (double fork without setsid).
    with contextlib.suppress(psutil.Error, OSError):
        sid = os.getsid(members.leader)
        known = {p.pid for p in procs}
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if proc.pid not in known and os.getsid(proc.pid) == sid:
                    procs.append(proc)
    return procs


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


def sample(members: Members) -> Sample:
    pids: list[int] = []
    rss = 0
    for proc in _find(members):
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            rss += proc.memory_info().rss
            pids.append(proc.pid)
    return Sample(tuple(pids), rss)


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
        left = sample(members).pids
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not left:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
