"""The bubblewrap backend: the process backend's runtime, rlimits, cgroup and watchdog, in ``bwrap``.

For machines without Docker where ``bwrap`` (Debian package ``bubblewrap``) can create user
namespaces. On top of everything the process backend does (a private uid on a root host, rlimits
set before ``exec``, a cgroup per sandbox where the host can make one, the watchdog), each
sandbox gets:

* new user, pid, ipc, uts, network and (where possible) cgroup namespaces: no network at all (the
  channel is a Unix socket), and ``/proc`` shows the sandbox's own processes only;
* a root filesystem of its own, read-only: ``/usr`` (and the ``/bin``, ``/lib``... links into it),
  the interpreter's install when it lives elsewhere, ``/etc/ld.so.cache``, the runtime at
  ``/opt/codemode`` and the channel directory at ``/run/codemode``. No host home, no project
  directory, no ``/root``, no other ``/etc`` file; a fresh ``/proc``, a minimal ``/dev``
  (read-only, with a private, size-capped tmpfs on ``/dev/shm``) and another on ``/tmp``; no
  ``/sys``, so the sandbox cannot reach its cgroup;
* a seccomp filter (:mod:`codemode.sandbox._seccomp`), ``PR_SET_NO_NEW_PRIVS`` (bwrap always
  sets it), an empty capability bounding set, a new session (no terminal to inject input into)
  and an empty environment;
* ``--die-with-parent``: the sandbox is killed when the host process dies.

What it does not do: limit CPU share (``cpus``). Memory (``memory_mb``, which the tmpfs mounts
count against) is bounded by the kernel only where a cgroup can be made (root, or a delegated
cgroup v2 subtree); elsewhere the watchdog and RLIMIT_AS bound it, as in the process backend.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import secrets
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import anyio

from codemode.config import SandboxConfig
from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox import _wire as wire
from codemode.sandbox._backend import Launch, SandboxInstance
from codemode.sandbox._cgroup import SandboxCgroup
from codemode.sandbox._files import BOOT_SCRIPT, install_runtime
from codemode.sandbox._linux import ChildPlan, Rlimits, make_preexec
from codemode.sandbox._memory_limit import MemoryLimit, choose_memory_limit
from codemode.sandbox._outcome import BackendName
from codemode.sandbox._process import (
    UID_BASE,
    UID_SPAN,
    Command,
    MiB,
    ProcessBackend,
    ProcessSandbox,
    pick_interpreter,
)
from codemode.sandbox._program import WorkspaceQuota
from codemode.sandbox._seccomp import DENIED, build_filter, current_arch
from codemode.sandbox._state import StateDir
from codemode.sandbox._watchdog import Members

__all__ = ["BwrapBackend", "bwrap_argv", "describe_bwrap", "find_bwrap", "probe_bwrap"]

RUNTIME_MOUNT = "/opt/codemode"
CHANNEL_MOUNT = wire.CHANNEL_DIR
SANDBOX_TMP = "/tmp"  # noqa: S108 - the sandbox's own tmpfs
SANDBOX_SHM = "/dev/shm"  # noqa: S108 - the sandbox's own tmpfs
HELPERS = 2
"""bwrap's own processes in each sandbox: the outer monitor and the pid namespace's init."""
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Top-level directories that hold (or, on merged-/usr systems, link to) what ``/usr`` provides."""
PROBE_TIMEOUT_S = 20.0


def find_bwrap() -> str | None:
    return shutil.which("bwrap") or next(
        (path for path in ("/usr/bin/bwrap", "/usr/local/bin/bwrap") if os.access(path, os.X_OK)), None
    )


def describe_bwrap(memory: MemoryLimit) -> str:
    """What a bwrap sandbox enforces (doctor and ``SandboxManager.backend.isolation`` say this)."""
    return (
        "bwrap backend: new user, pid, ipc, uts and network namespaces (no network, only its own "
        "processes in /proc), a read-only minimal root (/usr and the runtime; no home, project or /root), "
        f"private capped /tmp and /dev/shm, seccomp filter ({len(DENIED)} dangerous system calls denied), "
        f"no new privileges, no capabilities, empty environment, rlimits; {memory.describe()}; "
        "no CPU share limit"
    )


def _under(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _python_roots(python: str) -> list[str]:
    """Directories outside /usr that ``python`` needs (its prefix when it is installed elsewhere)."""
    try:
        out = subprocess.run(
            [python, "-I", "-c", "import sys;print(sys.base_prefix);print(sys.base_exec_prefix)"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailableError(f"cannot run {python}: {exc}") from exc
    if out.returncode != 0:
        raise SandboxUnavailableError(f"{python} failed: {out.stderr.strip()[-300:]}")
    candidates = [os.path.realpath(line) for line in out.stdout.splitlines()[:2]]
    candidates.append(os.path.dirname(python))
    # Binding a prefix that holds the home or the project directory would show them to the program.
    private = [os.path.realpath(Path.home()), os.path.realpath(Path.cwd())]
    roots: list[str] = []
    for candidate in candidates:
        if candidate == "" or _under(candidate, ["/usr", *roots]):
            continue
        if candidate == "/" or any(_under(directory, [candidate]) for directory in private):
            raise SandboxUnavailableError(
                f"the interpreter {python} is installed in {candidate}, which holds the home or the "
                "project directory; set [sandbox] process_python to a system python3"
            )
        roots.append(candidate)
    return roots


def _system_dirs() -> list[str]:
    """bwrap arguments that recreate /bin, /lib... as the host has them: links or read-only binds."""
    args: list[str] = []
    for name in SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


@dataclass(frozen=True)
class Layout:
    """Everything a sandbox's command line needs that does not change between sandboxes."""

    bwrap: str
    python: str
    python_roots: tuple[str, ...]
    runtime_dir: str


def bwrap_argv(
    layout: Layout,
    config: SandboxConfig,
    *,
    channel_dir: str | None,
    seccomp_fd: int,
    program: list[str],
    workspace: WorkspaceQuota | None = None,
) -> list[str]:
    """The full ``bwrap`` command line; the order matters (mounts are made in order)."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": SANDBOX_TMP,
        "TMPDIR": SANDBOX_TMP,
        "LANG": "C.UTF-8",
        # glibc reserves 64 MiB of address space per malloc arena; RLIMIT_AS counts it.
        "MALLOC_ARENA_MAX": "2",
        # The sandbox's own tmpfs mounts (the working directory is /tmp): a fresh run finds them empty.
        wire.SCRATCH_DIRS_ENV: os.pathsep.join((SANDBOX_TMP, SANDBOX_SHM)),
    }
    if channel_dir is not None:
        env[wire.CHANNEL_DIR_ENV] = CHANNEL_MOUNT
    if workspace is not None:
        env[wire.WORKSPACE_DIR_ENV] = wire.WORKSPACE_DIR
    args = [
        layout.bwrap,
        *("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"),
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        *("--cap-drop", "ALL"),
        *("--hostname", "codemode-sandbox"),
        "--clearenv",
    ]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += ["--ro-bind", "/usr", "/usr", *_system_dirs()]
    for root in layout.python_roots:
        args += ["--ro-bind", root, root]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # /dev is a writable tmpfs otherwise (unbounded): give /dev/shm a capped tmpfs, freeze the rest.
    # Both tmpfs mounts count against memory_mb (in the cgroup, or by the watchdog), as in Docker.
    args += ["--size", str(config.tmpfs_mb * MiB), "--tmpfs", SANDBOX_SHM, "--remount-ro", "/dev"]
    args += ["--size", str(config.tmpfs_mb * MiB), "--tmpfs", SANDBOX_TMP]
    if workspace is not None:
        # Capped at the quota's size (bwrap cannot cap its inodes: the runtime counts them).
        args += ["--size", str(workspace.tmpfs_bytes), "--perms", "0700", "--tmpfs", wire.WORKSPACE_DIR]
    args += ["--ro-bind", layout.runtime_dir, RUNTIME_MOUNT]
    if channel_dir is not None:
        args += ["--ro-bind", channel_dir, CHANNEL_MOUNT]
    args += ["--remount-ro", "/", "--chdir", SANDBOX_TMP, "--seccomp", str(seccomp_fd), "--", *program]
    return args


def _filter_fd() -> int:
    """A pipe holding the seccomp program (bwrap reads it to EOF); the caller closes it."""
    program = build_filter()
    read_end, write_end = os.pipe()
    try:
        # A few hundred bytes: far below the pipe buffer, so this never blocks.
        os.write(write_end, program)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


class _Spawner:
    """One long-lived thread that starts every bwrap.

    ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which fires when the *thread* that forked bwrap
    exits; anyio's worker threads exit after a while idle, which would kill warm sandboxes. This
    thread lives as long as the host process, which is what the flag should follow.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, function: Callable[[], Any]) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="codemode-bwrap-spawner", daemon=True)
                self._thread.start()
        self._queue.put((function, future))
        return future.result()

    def _loop(self) -> None:
        while True:
            function, future = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function())
            except BaseException as exc:  # handed to the caller's thread
                future.set_exception(exc)


_SPAWNER = _Spawner()


def _probe_plan(root: bool) -> ChildPlan:
    """Run the probe as a sandbox would run: rlimits, and a private uid on a root host."""
    rlimits = Rlimits(address_space=256 * MiB, cpu_seconds=10, nproc=None, fsize=MiB, nofile=64)
    uid = UID_BASE + secrets.randbelow(UID_SPAN) if root else None
    return ChildPlan(rlimits=rlimits, workdir="/", uid=uid, gid=uid)


def _run_probe(layout: Layout, config: SandboxConfig) -> str | None:
    """Start a throwaway sandbox running ``python -c``; None when it works, else why not."""
    check = (
        f"import os,sys;sys.path.insert(0,{RUNTIME_MOUNT!r});import codemode_runtime;"
        "s=open('/proc/self/status').read();"
        "assert 'NoNewPrivs:\\t1' in s and 'Seccomp:\\t2' in s, s"
    )
    fd = _filter_fd()
    argv = bwrap_argv(
        layout, config, channel_dir=None, seccomp_fd=fd, program=[layout.python, "-I", "-B", "-c", check]
    )
    try:
        out = subprocess.run(
            argv,
            env={},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            close_fds=True,
            pass_fds=(fd,),
            preexec_fn=make_preexec(_probe_plan(os.geteuid() == 0)),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not start: {exc}"
    finally:
        os.close(fd)
    if out.returncode != 0:
        return f"a test sandbox failed (exit {out.returncode}): {out.stderr.strip()[-400:]}"
    return None


def _layout(config: SandboxConfig, state: StateDir) -> Layout:
    bwrap = find_bwrap()
    if bwrap is None:
        raise SandboxUnavailableError("bwrap is not installed (Debian: apt-get install bubblewrap)")
    current_arch()  # fail closed before anything starts on an architecture without a filter
    python = pick_interpreter(config.process_python, for_other_uid=os.geteuid() == 0)
    state.ensure()
    runtime_dir = install_runtime(state.base)
    return Layout(bwrap, python, tuple(_python_roots(python)), str(runtime_dir))


def probe_bwrap(config: SandboxConfig, state: StateDir | None = None) -> tuple[Layout | None, str]:
    """``(layout, why)``: layout is None when bwrap cannot run sandboxes here, with the reason."""
    try:
        layout = _layout(config, state or StateDir())
    except (SandboxError, OSError) as exc:
        return None, str(exc)
    problem = _run_probe(layout, config)
    if problem is not None:
        return None, problem + " (bwrap needs unprivileged user namespaces: sysctl user.max_user_namespaces)"
    return layout, f"bwrap {layout.bwrap} starts sandboxes (user namespaces, seccomp and no-new-privs work)"


class BwrapBackend(ProcessBackend):
    """Runs each sandbox under bubblewrap (see the module docstring for the isolation)."""

    helpers = HELPERS

    def __init__(
        self,
        config: SandboxConfig,
        state: StateDir,
        layout: Layout | None = None,
        *,
        workspace: WorkspaceQuota | None = None,
    ) -> None:
        super().__init__(config, state, workspace=workspace)
        self._layout: Layout | None = layout

    @property
    def name(self) -> BackendName:
        return "bwrap"

    def isolation(self) -> str:
        return describe_bwrap(self._memory)

    def _choose_memory_limit(self) -> MemoryLimit:
        # Whatever its uid, a bwrap sandbox has no /sys: it cannot touch its cgroup.
        return choose_memory_limit(self._config, sandbox_is_host_user=False)

    async def prepare(self) -> None:
        if self._layout is None:
            layout, why = await anyio.to_thread.run_sync(probe_bwrap, self._config, self._state)
            if layout is None:
                raise SandboxUnavailableError(f"the bwrap backend cannot run here: {why}")
            self._layout = layout
        self._python = self._layout.python
        self._runtime_dir = Path(self._layout.runtime_dir)
        self._memory = await anyio.to_thread.run_sync(self._choose_memory_limit)
        await anyio.to_thread.run_sync(self._cleanup_orphans)

    def _plan(self, launch: Launch) -> ChildPlan:
        plan = super()._plan(launch)
        # bwrap makes the namespaces and mounts itself; the child only sets rlimits (and drops to the
        # sandbox's uid on a root host) before exec'ing bwrap. bwrap's own two processes count too.
        limits = plan.rlimits
        nproc = None if limits.nproc is None else limits.nproc + HELPERS
        return replace(
            plan,
            rlimits=replace(limits, nproc=nproc),
            workdir="/",
            new_netns=False,
            private_tmp_mb=None,
            user_netns=False,
        )

    def _command(self, launch: Launch, plan: ChildPlan) -> Command:
        if self._layout is None:
            raise SandboxError("BwrapBackend.prepare() was not awaited")
        fd = _filter_fd()
        program = [self._layout.python, "-I", "-B", f"{RUNTIME_MOUNT}/{BOOT_SCRIPT}"]
        argv = bwrap_argv(
            self._layout,
            self._config,
            channel_dir=str(launch.channel_dir),
            seccomp_fd=fd,
            program=program,
            workspace=self._workspace,
        )
        return Command(argv, {}, (fd,))

    def _popen(self, launch: Launch, plan: ChildPlan) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
        start = super()._popen
        started: tuple[subprocess.Popen[bytes], IO[bytes]] = _SPAWNER.call(lambda: start(launch, plan))
        return started

    def _sandbox(
        self,
        launch: Launch,
        proc: subprocess.Popen[bytes],
        log_file: IO[bytes],
        members: Members,
        cgroup: SandboxCgroup | None,
    ) -> SandboxInstance:
        return BwrapSandbox(launch, proc, log_file, members, self._config, cgroup)


class BwrapSandbox(ProcessSandbox):
    helpers = HELPERS

    def _killed_by(self, code: int) -> signal.Signals | None:
        # bwrap reports a child killed by signal N as exit status 128 + N.
        if code > 128:
            with contextlib.suppress(ValueError):
                return signal.Signals(code - 128)
        return super()._killed_by(code)
