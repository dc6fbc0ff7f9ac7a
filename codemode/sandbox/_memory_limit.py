"""How the process and bwrap backends enforce ``memory_mb``: a cgroup where one can be made, else
the watchdog; what each says when it stops a program, and what ``sandbox doctor`` says about it.
"""

from __future__ import annotations

from dataclasses import dataclass

from codemode.config import SandboxConfig
from codemode.sandbox._backend import Termination
from codemode.sandbox._cgroup import CgroupHost, SandboxCgroup, probe_cgroups
from codemode.sandbox._watchdog import Sample

__all__ = ["MemoryLimit", "cgroup_verdict", "choose_memory_limit", "watchdog_verdict"]

MiB = 1024 * 1024


@dataclass(frozen=True)
class MemoryLimit:
    """The enforcement in force for one backend on this host."""

    cgroups: CgroupHost | None
    why: str
    """Without cgroups: why none is used (and how to get one)."""

    @property
    def mode(self) -> str:
        return f"cgroup v{self.cgroups.version}" if self.cgroups is not None else "watchdog"

    def describe(self) -> str:
        if self.cgroups is not None:
            return self.cgroups.describe()
        return (
            f"memory watchdog, no cgroup ({self.why}): it adds up resident memory, memfds, shared "
            "memory and the sandbox's private tmpfs about ten times a second; memory held in kernel "
            "objects (a descriptor in flight on a socket, System V segments nobody maps) escapes it, "
            "and a program can go over the limit until the next look"
        )


def choose_memory_limit(config: SandboxConfig, *, sandbox_is_host_user: bool) -> MemoryLimit:
    """A cgroup per sandbox unless ``[sandbox] cgroups = "off"``, the sandbox would run as the
    user who owns its cgroup (it could raise its own limit), or this host cannot make one."""
    if config.cgroups == "off":
        return MemoryLimit(None, 'cgroups = "off" in [sandbox]')
    if sandbox_is_host_user:
        return MemoryLimit(
            None,
            "the sandbox would run as your own user, who owns its cgroup and could raise the limit; "
            "run as root, or use bwrap",
        )
    host, why = probe_cgroups()
    if host is None:
        return MemoryLimit(
            None, f"{why}; run as root, or give codemode a cgroup v2 subtree with memory and pids delegated"
        )
    return MemoryLimit(host, why)


def cgroup_verdict(config: SandboxConfig, cgroup: SandboxCgroup) -> Termination:
    return Termination(
        "oom",
        "OutOfMemory",
        f"the program ran out of memory: its sandbox reached its limit of {config.memory_mb} MiB "
        f"(cgroup v{cgroup.version} {cgroup.limit_file}, which counts resident memory, memfds, "
        "shared memory and tmpfs files) and the kernel killed it",
        cap="memory",
    )


def watchdog_verdict(config: SandboxConfig, now: Sample) -> Termination | None:
    """An out-of-memory verdict when what the sandbox holds is over ``memory_mb``."""
    if now.memory <= config.memory_mb * MiB:
        return None
    return Termination(
        "oom",
        "OutOfMemory",
        f"the program ran out of memory: its sandbox held {now.memory // MiB} MiB ({now.rss // MiB} MiB "
        f"resident, {now.shared // MiB} MiB in memfds and shared memory, {now.tmpfs // MiB} MiB in tmpfs "
        f"files), over the limit of {config.memory_mb} MiB, and the watchdog killed it",
        cap="memory",
    )
