"""The Docker backend's own seccomp profile: Docker's default, minus what the bwrap filter denies.

Docker's default profile is an allow list (every other system call fails with ``EPERM``) with
extra rules that open more calls to containers holding capabilities. Sandbox containers hold
none, so only its unconditional part applies to them, and that part allows io_uring (in the
engine versions whose list still has it, 20.10 among them), ``ptrace`` and ``process_vm_*`` (on
kernels from 4.8), handle-based opens (``name_to_handle_at``) and the clock-reading form of
``adjtimex``. io_uring is a large kernel interface with a history of escapes, and the operations
a ring carries out never pass seccomp. So this profile is that allow list without any call that
:data:`codemode.sandbox._seccomp.DENIED` names, and denies those explicitly, with the bwrap
filter's answers:

* ``EPERM`` for every name in ``DENIED`` (and for anything not allowed);
* ``clone`` only without a namespace flag, ``clone3`` answers ``ENOSYS`` (libc falls back to
  ``clone``), ``socket`` for any family but ``AF_VSOCK``, as Docker's default does;
* only the machine's own ABI: a call of another (i386 or x32 on x86-64, arm32 on arm64) matches
  no architecture of the profile and kills the process (as under bwrap), where Docker's default
  allows them all.

The profile goes to the engine inline (``--security-opt seccomp=<json>``): nothing is written to
disk, and a container whose profile the engine cannot load does not start.
"""

from __future__ import annotations

import errno
import functools
import json
from typing import Any

from codemode.sandbox._seccomp import CLONE_NAMESPACE_FLAGS, DENIED, current_arch

__all__ = ["DOCKER_DEFAULT_ALLOWED", "docker_profile", "docker_profile_json", "profile_summary"]

AF_VSOCK = 40

DOCKER_DEFAULT_ALLOWED = frozenset(
    """
    accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32
    clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64
    clock_nanosleep clock_nanosleep_time64 close close_range connect copy_file_range creat dup dup2
    dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait
    epoll_wait_old eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2 fadvise64
    fadvise64_64 fallocate fanotify_mark fchdir fchmod fchmodat fchown fchown32 fchownat fcntl
    fcntl64 fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstat64
    fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futex futex_time64 futex_waitv
    futimesat getcpu getcwd getdents getdents64 getegid getegid32 geteuid geteuid32 getgid
    getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp getpid getppid getpriority
    getrandom getresgid getresgid32 getresuid getresuid32 getrlimit get_robust_list getrusage
    getsid getsockname getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr
    inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy
    io_getevents io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit
    io_uring_enter io_uring_register io_uring_setup ipc kill landlock_add_rule
    landlock_create_ruleset landlock_restrict_self lchown lchown32 lgetxattr link linkat listen
    listxattr llistxattr _llseek lremovexattr lseek lsetxattr lstat lstat64 madvise membarrier
    memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2 mlockall mmap mmap2
    mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedreceive_time64 mq_timedsend
    mq_timedsend_time64 mq_unlink mremap msgctl msgget msgrcv msgsnd msync munlock munlockall
    munmap name_to_handle_at nanosleep newfstatat _newselect open openat openat2 pause pidfd_open
    pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll ppoll_time64 prctl
    pread64 preadv preadv2 prlimit64 process_mrelease process_vm_readv process_vm_writev pselect6
    pselect6_time64 ptrace pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv
    recvfrom recvmmsg recvmmsg_time64 recvmsg remap_file_pages removexattr rename renameat
    renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo
    rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo
    sched_getaffinity sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min
    sched_getscheduler sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity
    sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop
    semtimedop semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid
    setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid
    setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
    setreuid32 setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid
    setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4
    sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs statfs64 statx symlink
    symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete
    timer_getoverrun timer_gettime timer_gettime64 timer_settime timer_settime64 timerfd_create
    timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill truncate
    truncate64 ugetrlimit umask uname unlink unlinkat utime utimensat utimensat_time64 utimes vfork
    vmsplice wait4 waitid waitpid write writev
    """.split()  # noqa: SIM905 - 340 names read better wrapped than one to a line
)
"""What Docker's default profile allows a container without capabilities, on every architecture
(its ``ptrace`` and ``process_vm_*`` rule needs only a 4.8 kernel, so it is in here too)."""

_ARCH_ALLOWED = {
    # Docker's default allows these per architecture; glibc sets up thread-local storage with them.
    "x86_64": ("arch_prctl", "modify_ldt"),
    "aarch64": (),
}
_SCMP_ARCH = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}


def docker_profile(machine: str | None = None) -> dict[str, Any]:
    """The profile for this machine (or ``machine``); an unknown architecture fails closed
    (:class:`SandboxUnavailableError`), as the bwrap filter does."""
    arch = current_arch(machine)
    denied = set(DENIED)
    allowed = sorted((DOCKER_DEFAULT_ALLOWED | set(_ARCH_ALLOWED[arch.name])) - denied)
    rules: list[dict[str, Any]] = [
        {"names": allowed, "action": "SCMP_ACT_ALLOW"},
        {
            "names": ["socket"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_NE"}],
        },
        {
            # Docker's MASKED_EQ: (flags & value) == valueTwo, i.e. no namespace flag is set.
            "names": ["clone"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
        },
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
        # Already refused by the default action; named so that the profile says what it denies.
        {"names": sorted(denied), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
    ]
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": errno.EPERM,
        "architectures": [_SCMP_ARCH[arch.name]],
        "syscalls": rules,
    }


@functools.cache
def docker_profile_json(machine: str | None = None) -> str:
    """:func:`docker_profile` as compact JSON, for ``security_opt=["seccomp=<json>"]``."""
    return json.dumps(docker_profile(machine), separators=(",", ":"), sort_keys=True)


def profile_summary(machine: str | None = None) -> str:
    """One line for ``sandbox doctor`` and the backend's description."""
    arch = current_arch(machine)
    return (
        f"codemode's profile for {arch.name}: Docker's default allow list minus {len(DENIED)} "
        "system calls (io_uring, ptrace, namespaces, mounts, keyrings, bpf …), other ABIs refused"
    )
