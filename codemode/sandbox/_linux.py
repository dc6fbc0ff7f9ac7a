"""Linux primitives for the process backend: namespaces, mounts and rlimits applied in the child.

Everything here that runs between ``fork`` and ``exec`` (:func:`make_preexec`) touches only
objects prepared beforehand in the parent (resolved libc functions, encoded byte strings), so it
imports nothing and allocates little while other host threads may hold locks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ChildPlan", "Rlimits", "make_preexec", "namespaces_supported"]

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

# World-writable places a process could otherwise fill or use to talk to other processes; in the
# child's private mount namespace they all become the sandbox's own size-capped tmpfs.
SHARED_WRITABLE = ("/var/tmp", "/dev/shm", "/run/lock")  # noqa: S108
# System V shared memory limits of a private IPC namespace (a new one starts with no real limit).
SHM_SYSCTLS = ("/proc/sys/kernel/shmmax", "/proc/sys/kernel/shmall")


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


@dataclass(frozen=True)
class Rlimits:
    address_space: int
    cpu_seconds: int
    nproc: int | None
    fsize: int
    nofile: int

    def pairs(self) -> list[tuple[int, int]]:
        limits = [
            (resource.RLIMIT_AS, self.address_space),
            (resource.RLIMIT_CPU, self.cpu_seconds),
            (resource.RLIMIT_FSIZE, self.fsize),
            (resource.RLIMIT_NOFILE, self.nofile),
            (resource.RLIMIT_CORE, 0),
        ]
        if self.nproc is not None:
            limits.append((resource.RLIMIT_NPROC, self.nproc))
        return limits


@dataclass(frozen=True)
class ChildPlan:
    """What the child does to itself before ``exec``, in this order."""

    rlimits: Rlimits
    workdir: str
    cgroup_procs: tuple[str, ...] = ()
    """``cgroup.procs`` files the child writes itself into first, while still root: the sandbox's
    cgroup then charges everything it runs."""
    new_netns: bool = False
    """Unshare the network namespace (root only): the child then has no network at all."""
    private_tmp_mb: int | None = None
    """Unshare the mount and IPC namespaces, mount a tmpfs of this size on /tmp and cap System V
    shared memory at the same size (root only): both die with the sandbox's last process."""
    user_netns: bool = False
    """Non-root: unshare user, network and IPC namespaces (where the kernel allows it)."""
    uid: int | None = None
    gid: int | None = None


def namespaces_supported(user: bool) -> bool:
    """Whether a child can unshare the namespaces the plan asks for (probed once in a child)."""
    if _LIBC is None:
        return False
    flags = CLONE_NEWNET | CLONE_NEWIPC | (CLONE_NEWUSER if user else CLONE_NEWNS)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0 if _LIBC.unshare(flags) == 0 else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


PR_SET_NO_NEW_PRIVS = 38


def make_preexec(plan: ChildPlan) -> Callable[[], None]:
    """Build the function ``subprocess`` runs in the child between fork and exec."""
    libc = _LIBC
    tmp_options = (
        f"size={plan.private_tmp_mb}m,mode=0700,uid={plan.uid},gid={plan.gid}".encode()
        if plan.private_tmp_mb is not None and plan.uid is not None
        else f"size={plan.private_tmp_mb}m,mode=1777".encode()
    )
    shared = [path.encode() for path in SHARED_WRITABLE if os.path.isdir(path)]
    limits = plan.rlimits.pairs()
    workdir = plan.workdir
    cgroup_procs = [path.encode() for path in plan.cgroup_procs]
    private = plan.private_tmp_mb is not None
    flags = (CLONE_NEWNET if plan.new_netns else 0) | ((CLONE_NEWNS | CLONE_NEWIPC) if private else 0)
    tmp_bytes = (plan.private_tmp_mb or 0) * 1024 * 1024
    shm_values = [str(tmp_bytes).encode(), str(tmp_bytes // os.sysconf("SC_PAGE_SIZE")).encode()]
    shm_sysctls = list(zip([path.encode() for path in SHM_SYSCTLS], shm_values, strict=True))

    def write(path: bytes, value: bytes) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, value)
        finally:
            os.close(fd)

    def preexec() -> None:
        for path in cgroup_procs:
            write(path, b"0")  # "0": the writing process itself
        if libc is not None and flags:
            _check(libc.unshare(flags), "unshare")
            if plan.private_tmp_mb is not None:
                # Keep our mounts to ourselves, then give the sandbox a private, capped /tmp and put
                # the other world-writable directories on top of the same tmpfs.
                _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
                _check(
                    libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, tmp_options), "mount /tmp"
                )
                for path in shared:
                    _check(libc.mount(b"/tmp", path, None, MS_BIND, None), "bind-mount")
                # Segments in the new IPC namespace hold memory no process maps: cap them like /tmp.
                for path, value in shm_sysctls:
                    write(path, value)
        elif libc is not None and plan.user_netns:
            # Best effort without root: no network unless the kernel refuses user namespaces.
            libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC)
        os.chdir(workdir)
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        if plan.uid is not None and plan.gid is not None:
            os.setgroups([])
            os.setresgid(plan.gid, plan.gid, plan.gid)
            os.setresuid(plan.uid, plan.uid, plan.uid)
        if libc is not None:
            # A setuid binary must not take the program to another uid: that would hide its
            # processes from the watchdog (which finds them by uid) and give it root.
            _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")

    return preexec
