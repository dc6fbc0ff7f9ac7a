"""A seccomp filter for the bubblewrap backend, compiled to classic BPF with the standard library.

bwrap loads the program it reads from ``--seccomp FD`` right before it executes the runtime, so the
runtime and everything it starts run under it. The filter is a deny list on top of what the
namespaces and the empty capability set already forbid: it closes the kernel interfaces that are
the usual way out of an unprivileged sandbox, or that let a process inspect others.

* Denied (``EPERM``): ptrace and cross-process memory access, every namespace and mount call
  (``unshare``, ``setns``, the new mount API, ``pivot_root``, ``chroot``), ``clone`` with any
  namespace flag, keyrings, ``bpf``, ``perf_event_open``, ``userfaultfd``, io_uring, module and
  kexec loading, handle-based opens, clock and time setting, ``reboot``, swap, ``acct``, ``syslog``.
* ``clone3`` answers ``ENOSYS``: its flags sit behind a pointer a filter cannot read, and libc
  falls back to ``clone`` (whose flags it can check) on that error.
* A system call of another ABI (i386 or x32 on x86-64, arm32 on arm64) kills the process: each
  ABI numbers its calls differently, so a deny list written for one would not bind the other.

Fail closed: on a machine whose architecture is not in :data:`SYSCALLS` no filter can be built,
and :func:`build_filter` raises instead of returning a filter that would allow everything.

:data:`DENIED` is also what the Docker backend's own profile takes out of Docker's default allow
list (:mod:`codemode.sandbox._docker_seccomp`), so both backends refuse the same calls.
"""

from __future__ import annotations

import errno
import platform
import struct
import sys
from dataclasses import dataclass

from codemode.errors import SandboxUnavailableError

__all__ = ["DENIED", "SYSCALLS", "Arch", "build_filter", "current_arch"]

# <linux/filter.h>: classic BPF opcodes.
BPF_LD_W_ABS = 0x00 | 0x00 | 0x20
BPF_JMP_JEQ_K = 0x05 | 0x10 | 0x00
BPF_JMP_JGE_K = 0x05 | 0x30 | 0x00
BPF_JMP_JSET_K = 0x05 | 0x40 | 0x00
BPF_RET_K = 0x06 | 0x00

# <linux/seccomp.h>: return actions.
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16  # the low 32 bits of args[0] on a little-endian machine

X32_SYSCALL_BIT = 0x40000000
# <linux/sched.h>: every flag of clone() that creates a namespace.
CLONE_NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
    | 0x00000080  # CLONE_NEWTIME
)

DENIED = (
    "acct",
    "add_key",
    "adjtimex",
    "bpf",
    "chroot",
    "clock_adjtime",
    "clock_settime",
    "delete_module",
    "fanotify_init",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount",
    "mount_setattr",
    "move_mount",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "personality",
    "pidfd_getfd",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "setns",
    "settimeofday",
    "swapoff",
    "swapon",
    "syslog",
    "umount2",
    "unshare",
    "userfaultfd",
    "vhangup",
)
"""Denied on every architecture (each must be in that architecture's table)."""

_GENERIC_TABLE = {
    # asm-generic/unistd.h numbering, used by arm64 (and riscv64, not listed: untested here).
    "acct": 89,
    "add_key": 217,
    "adjtimex": 171,
    "bpf": 280,
    "chroot": 51,
    "clock_adjtime": 266,
    "clock_settime": 112,
    "clone": 220,
    "clone3": 435,
    "delete_module": 106,
    "fanotify_init": 262,
    "finit_module": 273,
    "fsconfig": 431,
    "fsmount": 432,
    "fsopen": 430,
    "fspick": 433,
    "init_module": 105,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "io_uring_setup": 425,
    "kcmp": 272,
    "kexec_file_load": 294,
    "kexec_load": 104,
    "keyctl": 219,
    "lookup_dcookie": 18,
    "mount": 40,
    "mount_setattr": 442,
    "move_mount": 429,
    "name_to_handle_at": 264,
    "nfsservctl": 42,
    "open_by_handle_at": 265,
    "open_tree": 428,
    "perf_event_open": 241,
    "personality": 92,
    "pidfd_getfd": 438,
    "pivot_root": 41,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "ptrace": 117,
    "quotactl": 60,
    "quotactl_fd": 443,
    "reboot": 142,
    "request_key": 218,
    "setns": 268,
    "settimeofday": 170,
    "swapoff": 225,
    "swapon": 224,
    "syslog": 116,
    "umount2": 39,
    "unshare": 97,
    "userfaultfd": 282,
    "vhangup": 58,
}

_X86_64_TABLE = {
    "acct": 163,
    "add_key": 248,
    "adjtimex": 159,
    "bpf": 321,
    "chroot": 161,
    "clock_adjtime": 305,
    "clock_settime": 227,
    "clone": 56,
    "clone3": 435,
    "delete_module": 176,
    "fanotify_init": 300,
    "finit_module": 313,
    "fsconfig": 431,
    "fsmount": 432,
    "fsopen": 430,
    "fspick": 433,
    "init_module": 175,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "io_uring_setup": 425,
    "kcmp": 312,
    "kexec_file_load": 320,
    "kexec_load": 246,
    "keyctl": 250,
    "lookup_dcookie": 212,
    "mount": 165,
    "mount_setattr": 442,
    "move_mount": 429,
    "name_to_handle_at": 303,
    "nfsservctl": 180,
    "open_by_handle_at": 304,
    "open_tree": 428,
    "perf_event_open": 298,
    "personality": 135,
    "pidfd_getfd": 438,
    "pivot_root": 155,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "ptrace": 101,
    "quotactl": 179,
    "quotactl_fd": 443,
    "reboot": 169,
    "request_key": 249,
    "setns": 308,
    "settimeofday": 164,
    "swapoff": 168,
    "swapon": 167,
    "syslog": 103,
    "umount2": 166,
    "unshare": 272,
    "userfaultfd": 323,
    "vhangup": 153,
    # x86 only: raw port I/O and long-gone module calls.
    "iopl": 172,
    "ioperm": 173,
    "uselib": 134,
    "create_module": 174,
    "get_kernel_syms": 177,
    "query_module": 178,
}


@dataclass(frozen=True)
class Arch:
    name: str
    audit: int
    """AUDIT_ARCH_* value the kernel reports in ``seccomp_data.arch`` for this ABI."""
    table: dict[str, int]
    x32_bit: bool = False
    """Whether numbers with ``__X32_SYSCALL_BIT`` reach the kernel under this audit arch (x86-64)."""


SYSCALLS: dict[str, Arch] = {
    "x86_64": Arch("x86_64", 0xC000003E, _X86_64_TABLE, x32_bit=True),
    "aarch64": Arch("aarch64", 0xC00000B7, _GENERIC_TABLE),
}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def current_arch(machine: str | None = None) -> Arch:
    """The syscall table of this machine (or of ``machine``); unknown ones fail closed."""
    name = (machine or platform.machine()).lower()
    arch = SYSCALLS.get(_ALIASES.get(name, name))
    if arch is None:
        raise SandboxUnavailableError(
            f"no seccomp filter is known for the {name!r} architecture, so neither the bwrap nor the "
            f"docker backend can run here (known: {', '.join(sorted(SYSCALLS))})"
        )
    return arch


class _Assembler:
    """Classic BPF with forward jumps to labels, resolved when the program is finished."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | int, str | int, int]] = []
        self._labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self._code.append((BPF_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: str | int, false: str | int = 0) -> None:
        self._code.append((op, true, false, k))

    def ret(self, value: int) -> None:
        self._code.append((BPF_RET_K, 0, 0, value))

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def _offset(self, here: int, target: str | int) -> int:
        if isinstance(target, int):
            return target
        distance = self._labels[target] - here - 1
        if not 0 <= distance <= 255:
            raise ValueError(f"BPF jump to {target} is out of range ({distance})")
        return distance

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (code, true, false, k) in enumerate(self._code):
            out += struct.pack("=HBBI", code, self._offset(index, true), self._offset(index, false), k)
        return bytes(out)


def build_filter(machine: str | None = None) -> bytes:
    """The filter program as ``struct sock_filter[]`` bytes, ready for ``bwrap --seccomp FD``."""
    arch = current_arch(machine)
    missing = [name for name in DENIED if name not in arch.table]
    if missing:  # a table that does not cover the list would silently allow those calls
        raise SandboxUnavailableError(f"the {arch.name} seccomp table lacks {', '.join(missing)}")
    if sys.byteorder != "little":  # OFFSET_ARG0_LOW reads the low half of a little-endian u64
        raise SandboxUnavailableError("the seccomp filter is written for little-endian machines only")
    # Everything in the table but the two clone calls, which get their own rules below.
    denied = sorted(number for name, number in arch.table.items() if name not in ("clone", "clone3"))
    asm = _Assembler()
    asm.load(OFFSET_ARCH)
    asm.jump(BPF_JMP_JEQ_K, arch.audit, true=1)
    asm.ret(RET_KILL_PROCESS)
    asm.load(OFFSET_NR)
    if arch.x32_bit:
        asm.jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, true="kill")
    asm.jump(BPF_JMP_JEQ_K, arch.table["clone3"], true="enosys")
    asm.jump(BPF_JMP_JEQ_K, arch.table["clone"], true="clone")
    for number in denied:
        asm.jump(BPF_JMP_JEQ_K, number, true="eperm")
    asm.ret(RET_ALLOW)
    # BPF jumps only forward, so the clone check has its own allow.
    asm.label("clone")
    asm.load(OFFSET_ARG0_LOW)
    asm.jump(BPF_JMP_JSET_K, CLONE_NAMESPACE_FLAGS, true="eperm")
    asm.ret(RET_ALLOW)
    asm.label("eperm")
    asm.ret(RET_ERRNO | errno.EPERM)
    asm.label("enosys")
    asm.ret(RET_ERRNO | errno.ENOSYS)
    asm.label("kill")
    asm.ret(RET_KILL_PROCESS)
    return asm.assemble()
