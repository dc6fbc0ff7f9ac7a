"""How the host measures what one run used of its sandbox: CPU time, peak memory, caps hit.

Measured from outside, never asked of the sandbox: what runs inside is untrusted and could
report anything. Each sandbox has one meter, and :meth:`UsageMeter.begin` / :meth:`~UsageMeter.end`
bracket each run it serves, so a sandbox that serves several runs (a session, a batch worker)
reports each run's own numbers: CPU is the difference of a cumulative counter across the run, and
the peak counter is reset as the run starts. Both calls read a few small kernel files on the event
loop: a cgroup's files are held open from the sandbox's start, so each read is one ``pread``
(microseconds; a thread hand-off would cost more); a file that cannot be read gives None for its
number, never an error for the run.

* :class:`CgroupMeter`: a Docker container's cgroup, or the cgroup a local backend makes per
  sandbox. It counts every process and every page the sandbox charges (tmpfs files, shared memory,
  kernel memory), whoever holds them. v1: ``cpuacct.usage``, ``memory.max_usage_in_bytes``
  (reset by writing 0, which needs root), ``memory.oom_control``; v2: ``cpu.stat``, ``memory.peak``
  (reset through the descriptor that reads it, on kernels from 6.12), ``memory.events``; both:
  ``pids.events`` (forks refused at ``pids.max``).
* :class:`ProcfsMeter`: a local sandbox without a cgroup. CPU is the user + system time of the
  sandbox's process tree (``/proc/<pid>/stat``, with the time of the children each has reaped); the
  peak is the larger of the watchdog's largest sample during the run and the sum of the high-water
  resident memory (``VmHWM``, reset through ``clear_refs``) of the processes alive at the end.
  A process that leaves the tree (a double fork) and ends before the run does is not counted.

A peak counter that cannot be reset still tells the truth on a sandbox's first run (it has seen
nothing else); on a later run its number is dropped (None) rather than reported as this run's.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from codemode._run_usage import CapHit, UsageSource
from codemode.sandbox._cgroup import CgroupPaths

__all__ = ["CgroupMeter", "Measured", "NoMeter", "ProcfsMeter", "UsageMeter", "process_tree", "tree_cpu_s"]

CLEAR_PEAK_RSS = b"5"
"""Written to ``/proc/<pid>/clear_refs``: reset the process's peak resident set size (Linux 4.0+)."""
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Measured:
    cpu_s: float | None = None
    peak_bytes: int | None = None
    cap: CapHit | None = None
    """A cap the kernel's counters saw hit during the run (an out-of-memory kill, a refused fork)."""
    source: UsageSource | None = None


class UsageMeter(Protocol):
    def begin(self) -> None:
        """The run starts: note the counters, reset the peak."""
        ...

    def end(self) -> Measured:
        """The run has ended (before the sandbox is killed or torn down): what it used."""
        ...

    def close(self) -> None:
        """The sandbox is torn down: let go of what the meter holds open (idempotent)."""
        ...


class NoMeter:
    """A sandbox whose usage this host cannot see (the in-process test backend, a remote engine)."""

    def begin(self) -> None:
        return None

    def end(self) -> Measured:
        return Measured()

    def close(self) -> None:
        return None


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("ascii", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _write(path: Path, value: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, value)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _delta(start: float | None, now: float | None) -> float | None:
    # Never below zero: a counter that went down (a process left the tree) is not negative work.
    return None if start is None or now is None else max(0.0, now - start)


def _keyed(text: str | None, key: str) -> int | None:
    """The value of a ``key value`` line of a flat-keyed kernel file (None when absent)."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
    return None


class _KernelFile:
    """A cgroup file held open for the sandbox's life: each read or reset is one ``pread`` or
    ``pwrite`` at offset 0 (a couple of microseconds), where opening the file by path each time
    costs ten times that, on every run."""

    def __init__(self, path: Path, *, writable: bool = False) -> None:
        self.fd: int | None = None
        with contextlib.suppress(OSError):
            self.fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        if self.fd is None and writable:  # readable still: a peak that cannot be reset
            with contextlib.suppress(OSError):
                self.fd = os.open(path, os.O_RDONLY)
        self.writable = writable and self.fd is not None
        # Closed with the sandbox (``close``), or when the meter is dropped without it.
        self._closer = None if self.fd is None else weakref.finalize(self, os.close, self.fd)

    def text(self) -> str | None:
        if self.fd is None:
            return None
        try:
            return os.pread(self.fd, 4096, 0).decode("ascii", errors="replace")
        except OSError:  # the cgroup is gone (ENODEV): the sandbox was torn down
            return None

    def number(self) -> int | None:
        text = self.text()
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def write(self, value: bytes) -> bool:
        if self.fd is None or not self.writable:
            return False
        try:
            os.pwrite(self.fd, value, 0)
        except OSError:  # v1 without root, or v2 before the kernel could reset memory.peak
            self.writable = False
            return False
        return True

    def close(self) -> None:
        if self._closer is not None:
            self._closer()
        self.fd = None


class CgroupMeter:
    """A run's usage from a cgroup's counters (see the module docstring).

    The counters' files are opened once, when the meter is made (as the sandbox starts, off the
    path of a run), and kept open until :meth:`close`. ``cpu_fallback`` gives cumulative CPU
    seconds when the cgroup has no CPU counter (a v1 host without a cpuacct hierarchy)."""

    def __init__(self, paths: CgroupPaths, *, cpu_fallback: Callable[[], float | None] | None = None) -> None:
        v1 = paths.version == 1
        self._v1 = v1
        self._cpu_fallback = cpu_fallback
        cpu = None if paths.cpu is None else paths.cpu / ("cpuacct.usage" if v1 else "cpu.stat")
        self._cpu = None if cpu is None else _KernelFile(cpu)
        # v2 resets memory.peak per open file: this one file's reads see the peak since its reset.
        self._peak = _KernelFile(
            paths.memory / ("memory.max_usage_in_bytes" if v1 else "memory.peak"), writable=True
        )
        self._oom = _KernelFile(paths.memory / ("memory.oom_control" if v1 else "memory.events"))
        self._pids = None if paths.pids is None else _KernelFile(paths.pids / "pids.events")
        self._runs = 0
        self._cpu_start: float | None = None
        self._oom_start = 0
        self._refused_start = 0
        self._peak_reset = False

    def _cpu_s(self) -> float | None:
        if self._cpu is None:
            return self._cpu_fallback() if self._cpu_fallback is not None else None
        if self._v1:
            nanoseconds = self._cpu.number()
            return None if nanoseconds is None else nanoseconds / 1e9
        microseconds = _keyed(self._cpu.text(), "usage_usec")
        return None if microseconds is None else microseconds / 1e6

    def _oom_kills(self) -> int:
        return _keyed(self._oom.text(), "oom_kill") or 0

    def _forks_refused(self) -> int:
        return (_keyed(self._pids.text(), "max") or 0) if self._pids is not None else 0

    def begin(self) -> None:
        self._runs += 1
        self._cpu_start = self._cpu_s()
        self._oom_start = self._oom_kills()
        self._refused_start = self._forks_refused()
        self._peak_reset = self._peak.write(b"0" if self._v1 else b"reset")

    def end(self) -> Measured:
        cpu = _delta(self._cpu_start, self._cpu_s())
        peak = self._peak.number()
        if not self._peak_reset and self._runs > 1:
            peak = None  # the highest mark of an earlier run, perhaps
        cap: CapHit | None = None
        if self._oom_kills() > self._oom_start:
            cap = "memory"
        elif self._forks_refused() > self._refused_start:
            cap = "pids"
        return Measured(cpu, peak, cap, "cgroup")

    def close(self) -> None:
        for file in (self._cpu, self._peak, self._oom, self._pids):
            if file is not None:
                file.close()


# -- a process tree, from /proc --------------------------------------------------------------


def process_tree(leader: int) -> list[int]:
    """``leader`` and its descendants, from ``/proc/<pid>/task/<tid>/children`` (no scan of /proc)."""
    found: list[int] = []
    todo = [leader]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            listing = _read(Path(f"/proc/{pid}/task/{task}/children"))
            todo += [int(child) for child in (listing or "").split() if child.isdigit()]
    return found


def tree_cpu_s(pids: list[int]) -> float:
    """User + system seconds of ``pids`` and of the children each of them has reaped."""
    ticks = 0
    for pid in pids:
        text = _read(Path(f"/proc/{pid}/stat"))
        if text is None:
            continue
        # After the command name, which may hold spaces and parentheses: field 3 (state) onwards.
        fields = text.rpartition(")")[2].split()
        with contextlib.suppress(ValueError, IndexError):
            ticks += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return ticks / _TICKS_PER_S


def _high_water_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        total += (_keyed_kb(Path(f"/proc/{pid}/status"), "VmHWM:") or 0) * 1024
    return total


def _keyed_kb(path: Path, key: str) -> int | None:
    text = _read(path)
    for line in (text or "").splitlines():
        if line.startswith(key):
            with contextlib.suppress(ValueError, IndexError):
                return int(line.split()[1])
    return None


class ProcfsMeter:
    """A run's usage from ``/proc``, for a local sandbox without a cgroup (see the module docstring).

    The watchdog passes each sample of the sandbox's memory to :meth:`saw`."""

    def __init__(self, leader: int) -> None:
        self._leader = leader
        self._runs = 0
        self._cpu_start: float | None = None
        self._peak_reset = False
        self._sampled = 0

    def saw(self, memory_bytes: int) -> None:
        """One watchdog sample of what the sandbox holds (resident, shared and tmpfs memory)."""
        self._sampled = max(self._sampled, memory_bytes)

    def begin(self) -> None:
        self._runs += 1
        pids = process_tree(self._leader)
        self._cpu_start = tree_cpu_s(pids)
        self._sampled = 0
        self._peak_reset = all(_write(Path(f"/proc/{pid}/clear_refs"), CLEAR_PEAK_RSS) for pid in pids)

    def end(self) -> Measured:
        pids = process_tree(self._leader)
        cpu = _delta(self._cpu_start, tree_cpu_s(pids))
        peak: int | None = max(self._sampled, _high_water_bytes(pids))
        if not self._peak_reset and self._runs > 1:
            peak = self._sampled or None
        return Measured(cpu, peak, None, "procfs")

    def close(self) -> None:
        return None  # nothing held open
