"""What one run cost the machine: the sandbox's CPU and peak memory, its channel traffic, and the
cap that stopped it.

A leaf of its own because the sandbox measures it and every layer above reports it (the engine's
``RunResult``, ``codemode run --json``, serve's ``structuredContent``, batch summaries), and
importing a result type must not load the sandbox. :mod:`codemode.sandbox` exports it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["CapHit", "RunUsage", "UsageSource"]

CapHit = Literal["memory", "cpu", "pids", "wall_time"]
"""The limit that stopped a run or refused it something: ``memory`` (``memory_mb``: an out-of-memory
kill, or a ``MemoryError`` at the address-space limit), ``cpu`` (the CPU-time limit), ``pids``
(a process the program started over ``pids``, refused or killed), ``wall_time`` (``wall_time_s``)."""

UsageSource = Literal["cgroup", "procfs"]
"""Where ``cpu_s`` and ``peak_mb`` were read: the sandbox's cgroup (a container's, or the one a local
backend makes: every process and every page it charges, tmpfs files included), or ``/proc`` for
the sandbox's processes (a local sandbox without a cgroup; see :class:`RunUsage`)."""


class RunUsage(BaseModel):
    """The resources one run used, measured by the host (never reported by the sandbox, whose
    word is untrusted).

    ``cpu_s`` and ``peak_mb`` cover this run only, also when a sandbox serves several (a session,
    a batch worker): CPU is the difference of the sandbox's CPU counter across the run, and the
    peak counter is reset when the run starts. They are None where they cannot be known: the
    in-process test backend, a Docker engine whose containers' cgroups this host cannot see (a
    remote engine), or a peak counter that cannot be reset on the second run of a sandbox.
    Without a cgroup (``source == "procfs"``) CPU sums the sandbox's process tree (a process that
    leaves the tree and ends before the run does is missed), and the peak is the larger of the
    watchdog's largest sample and the high-water resident memory of the processes alive at the
    end, summed.
    """

    model_config = ConfigDict(frozen=True)

    cpu_s: float | None = None
    """User + system CPU seconds of the sandbox's processes during this run."""
    peak_mb: float | None = None
    """The most memory the sandbox held during this run, in MiB (what ``memory_mb`` limits)."""
    channel_in_bytes: int = 0
    """Bytes the sandbox received over its channel in this run (the program, stub modules, tool
    results): its only network."""
    channel_out_bytes: int = 0
    """Bytes the sandbox sent over its channel in this run (calls, output, the result)."""
    cap_hit: CapHit | None = None
    """The cap that stopped the run, or refused it memory or a process, if one did."""
    source: UsageSource | None = None
    """Where ``cpu_s`` and ``peak_mb`` were read (None when neither could be)."""
