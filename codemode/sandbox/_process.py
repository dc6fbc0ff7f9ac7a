"""The process backend: the same runtime as a local subprocess, the last resort.

Weaker than the Docker and bubblewrap backends (``_bwrap.py`` builds on this one), and said so
wherever it is chosen. What it does:

* the runtime runs in its own session (``setsid``) with no inherited file descriptors, an empty
  environment (only what the runtime needs) and a private working directory;
* rlimits set in the child before ``exec``: address space (``memory_mb``), CPU seconds (a backstop;
  wall time is enforced by the host), processes, file size (``tmpfs_mb``), open files, no core
  dumps;
* when the host runs as root: a private uid per sandbox (so RLIMIT_NPROC binds, the sandbox cannot
  signal or read other processes, and it cannot read files that are not world-readable), a new
  network namespace (no network at all; the Unix socket still works), and a private mount
  namespace with a size-capped tmpfs on /tmp (also over /var/tmp, /dev/shm, /run/lock);
* without root: the user's own uid (the program can read what the user can), a user+network
  namespace where the kernel allows unprivileged ones, and RLIMIT_NPROC relative to the user's
  current process count;
* on a root host, a cgroup per sandbox (:mod:`codemode.sandbox._cgroup`) that the kernel holds to
  ``memory_mb`` (every page: resident, memfds, shared memory, the private tmpfs) and ``pids``;
* a watchdog during each run for the process count and, without a cgroup, for the memory the
  sandbox holds (:mod:`codemode.sandbox._watchdog`), killing the whole sandbox (every process of
  its uid, or its tree and session).

What it does not do: hide world-readable host files, limit CPU share (``cpus``), or apply seccomp.

A run's workspace is a host folder of the sandbox's own (``<sandbox>/workspace``, private to its
uid on a root host), named to the program by ``$CODEMODE_WORKSPACE`` instead of appearing at
``/workspace``. No tmpfs caps it: a write past the quota succeeds until the disk or the file-size
rlimit stops it, and the runtime refuses the whole workspace when the program ends (the run fails
with ``WorkspaceQuotaExceeded`` and the workspace keeps its files from before the run).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import anyio
import psutil

from codemode.config import SandboxConfig
from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox import _wire as wire
from codemode.sandbox._backend import Launch, SandboxInstance, Termination
from codemode.sandbox._cgroup import SandboxCgroup
from codemode.sandbox._files import BOOT_SCRIPT, install_runtime
from codemode.sandbox._linux import ChildPlan, Rlimits, make_preexec, namespaces_supported
from codemode.sandbox._memory_limit import MemoryLimit, cgroup_verdict, choose_memory_limit, watchdog_verdict
from codemode.sandbox._outcome import BackendName
from codemode.sandbox._program import WorkspaceQuota
from codemode.sandbox._state import StateDir, same_process
from codemode.sandbox._usage_meter import CgroupMeter, ProcfsMeter, UsageMeter, tree_cpu_s
from codemode.sandbox._watchdog import Members, kill_members, sample

__all__ = ["Command", "ProcessBackend", "ProcessSandbox", "describe_isolation", "pick_interpreter"]

log = logging.getLogger("codemode.sandbox.process")

MiB = 1024 * 1024
# Private uids for sandboxes are drawn from this range (root host only). Nothing else should use it.
UID_BASE = 0x70000000
UID_SPAN = 1 << 24
WATCH_INTERVAL_S = 0.1
LOG_NAME = "runtime.log"
WORKSPACE_NAME = "workspace"
"""A process sandbox's workspace, beside its channel directory (handed over as an env var)."""
LOG_TAIL_BYTES = 2000
# With a private mount namespace the sandbox works in its own tmpfs mounted on /tmp.
PRIVATE_TMP = "/tmp"  # noqa: S108


@dataclass
class Command:
    """What ``Popen`` runs for one sandbox (subclasses wrap the runtime in another launcher)."""

    argv: list[str]
    env: dict[str, str]
    pass_fds: tuple[int, ...] = field(default_factory=tuple)
    """Descriptors the child inherits; the parent closes them once the child has started."""


def _others_can(path: Path, mode: int) -> bool:
    """Whether a uid that is neither owner nor group can reach ``path`` with ``mode`` (r/x bits)."""
    try:
        real = path.resolve(strict=True)
        for parent in reversed(real.parents):
            if not parent.stat().st_mode & 0o001:
                return False
        return real.stat().st_mode & mode == mode
    except OSError:
        return False


def _probe_interpreter(python: str) -> str | None:
    """The stdlib directory of ``python`` if it is Python >= 3.11, else None."""
    try:
        out = subprocess.run(
            [
                python,
                "-I",
                "-c",
                "import sys,sysconfig;print(sys.version_info>=(3,11));print(sysconfig.get_paths()['stdlib'])",
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) < 2 or lines[0] != "True":
        return None
    return lines[1]


def describe_isolation(*, root: bool, namespaces: bool, memory: MemoryLimit) -> str:
    """What a process sandbox isolates here: as root (``namespaces``: network, mount and IPC
    namespaces) or as the user (``namespaces``: user, network and IPC namespaces)."""
    if root:
        if namespaces:
            net_tmp = "no network (own network namespace), a private capped tmp dir and IPC namespace"
        else:
            net_tmp = "NETWORK NOT ISOLATED (unshare failed), no private /tmp"
        return (
            f"process backend (weaker than docker and bwrap): private uid per sandbox, {net_tmp}, "
            f"rlimits; {memory.describe()}; world-readable host files stay visible, no seccomp, no CPU share"
        )
    net = "no network (user+network namespace)" if namespaces else "NETWORK NOT ISOLATED"
    return (
        "process backend (weaker than docker and bwrap): runs as your own user (the program can read "
        f"your files), {net}, rlimits; {memory.describe()}; no private /tmp (files it writes in the "
        "host's /tmp or /dev/shm are not counted and outlive the run), no seccomp, no CPU share"
    )


def pick_interpreter(configured: str | None, *, for_other_uid: bool) -> str:
    """The Python the sandbox runs: ``configured``, else this one, else a system python3.

    With a private sandbox uid, the interpreter and its standard library must be readable by a
    stranger (a pyenv Python under a 0700 home directory is not), hence the fallbacks.
    """
    current = os.path.realpath(sys.executable)
    candidates = [configured] if configured else [current, "/usr/bin/python3", "/usr/local/bin/python3"]
    for candidate in candidates:
        if not Path(candidate).exists():
            continue
        if not for_other_uid:
            if candidate == current or _probe_interpreter(candidate):
                return candidate
            continue
        stdlib = sysconfig.get_paths()["stdlib"] if candidate == current else _probe_interpreter(candidate)
        if stdlib and _others_can(Path(candidate), 0o005) and _others_can(Path(stdlib) / "os.py", 0o004):
            return candidate
    raise SandboxUnavailableError(
        "no Python >= 3.11 that the sandbox user can run was found"
        + (
            f" (tried {configured})"
            if configured
            else " (tried this interpreter, /usr/bin/python3, /usr/local/bin/python3)"
        )
        + "; set [sandbox] process_python to one that is world-readable"
    )


class ProcessBackend:
    """Runs each sandbox as a local subprocess (see the module docstring for the isolation)."""

    helpers = 0
    """Launcher processes of each sandbox that are not the program's (see ``ProcessSandbox``)."""

    def __init__(
        self, config: SandboxConfig, state: StateDir, *, workspace: WorkspaceQuota | None = None
    ) -> None:
        self._config = config
        self._workspace = workspace
        """Give each sandbox a workspace directory: a host folder here, with no size cap of the
        kernel (the runtime checks the quota when a program ends)."""
        self._state = state
        self._root = os.geteuid() == 0
        self._python: str | None = None
        self._runtime_dir: Path | None = None
        self._namespaces = False
        """Root: network, mount and IPC namespaces can be unshared; otherwise user+network+IPC."""
        self._memory = MemoryLimit(None, "not probed yet (prepare() was not awaited)")

    @property
    def name(self) -> BackendName:
        return "process"

    def isolation(self) -> str:
        return describe_isolation(root=self._root, namespaces=self._namespaces, memory=self._memory)

    def _choose_memory_limit(self) -> MemoryLimit:
        # Without root the sandbox runs as the user who would own its cgroup.
        return choose_memory_limit(self._config, sandbox_is_host_user=not self._root)

    async def prepare(self) -> None:
        self._state.ensure()
        self._python = await anyio.to_thread.run_sync(
            lambda: pick_interpreter(self._config.process_python, for_other_uid=self._root)
        )
        self._runtime_dir = await anyio.to_thread.run_sync(install_runtime, self._state.base)
        self._namespaces = await anyio.to_thread.run_sync(namespaces_supported, not self._root)
        if self._root and not self._namespaces:
            log.warning("cannot create namespaces: process sandboxes will have network access")
        self._memory = await anyio.to_thread.run_sync(self._choose_memory_limit)
        await anyio.to_thread.run_sync(self._cleanup_orphans)

    def _cleanup_orphans(self) -> None:
        for root, meta in self._state.orphans():
            if meta.get("backend") == self.name:
                uid, pid, started = meta.get("uid"), meta.get("pid"), meta.get("pid_started")
                if isinstance(uid, int) and uid >= UID_BASE and self._root:
                    kill_members(Members(leader=-1, uid=uid))
                elif isinstance(pid, int) and isinstance(started, float) and same_process(pid, started):
                    kill_members(Members(leader=pid))
                log.info("removed orphaned %s sandbox %s", self.name, root.name)
            # Its cgroup (whichever local backend made it), where it recorded one: on v1 that is
            # under the dead host's own cgroup, which no other host would look in.
            cgroup = SandboxCgroup.recorded(meta, root.name)
            if cgroup is not None and not cgroup.remove():
                log.warning("orphaned sandbox %s: cgroup %s remains", root.name, cgroup.dirs)
            self._state.remove(root)

    def new_launch(self) -> Launch:
        sandbox_id, root = self._state.new_sandbox(self.name)
        owner: tuple[int, int] | None = None
        if self._root:
            uid = UID_BASE + secrets.randbelow(UID_SPAN)
            owner = (uid, uid)
            self._state.write_meta(root, {"uid": uid})
        return Launch(sandbox_id=sandbox_id, root=root, channel_dir=root / "ch", owner=owner)

    def _plan(self, launch: Launch) -> ChildPlan:
        config = self._config
        if self._root:
            nproc: int | None = config.pids
        else:
            # RLIMIT_NPROC counts all of the user's processes: allow the sandbox `pids` more.
            mine = sum(
                1
                for p in psutil.process_iter(["uids"])
                if p.info["uids"] and p.info["uids"].real == os.getuid()
            )
            nproc = mine + config.pids
        rlimits = Rlimits(
            address_space=config.memory_mb * MiB,
            cpu_seconds=max(10, math.ceil(config.wall_time_s * 10)),
            nproc=nproc,
            fsize=config.tmpfs_mb * MiB,
            nofile=config.nofile,
        )
        if self._root and launch.owner is not None:
            uid, gid = launch.owner
            return ChildPlan(
                rlimits=rlimits,
                workdir=PRIVATE_TMP if self._namespaces else str(launch.root / "work"),
                new_netns=self._namespaces,
                private_tmp_mb=config.tmpfs_mb if self._namespaces else None,
                uid=uid,
                gid=gid,
            )
        return ChildPlan(rlimits=rlimits, workdir=str(launch.root / "work"), user_netns=self._namespaces)

    def _command(self, launch: Launch, plan: ChildPlan) -> Command:
        """The runtime's command line and environment; creates the private work directory."""
        if self._python is None or self._runtime_dir is None:
            raise SandboxError(f"{type(self).__name__}.prepare() was not awaited")
        if plan.workdir != PRIVATE_TMP:
            os.mkdir(plan.workdir, 0o700)
            if launch.owner:
                os.chown(plan.workdir, *launch.owner)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": plan.workdir,
            "TMPDIR": plan.workdir,
            "LANG": "C.UTF-8",
            # glibc reserves 64 MiB of address space per malloc arena; RLIMIT_AS counts it.
            "MALLOC_ARENA_MAX": "2",
            wire.CHANNEL_DIR_ENV: str(launch.channel_dir),
            # The private working directory, or the private tmpfs on /tmp (which /var/tmp, /dev/shm
            # and /run/lock are bound to): the sandbox's own, so a fresh run finds it empty. The
            # host's /tmp without a mount namespace is shared, and is never named here.
            wire.SCRATCH_DIRS_ENV: plan.workdir,
        }
        if self._workspace is not None:
            workspace = launch.root / WORKSPACE_NAME
            os.mkdir(workspace, 0o700)
            if launch.owner:
                os.chown(workspace, *launch.owner)
            env[wire.WORKSPACE_DIR_ENV] = str(workspace)
        return Command([self._python, "-I", "-B", str(self._runtime_dir / BOOT_SCRIPT)], env)

    def _popen(self, launch: Launch, plan: ChildPlan) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
        """Start the sandbox's first process (blocking; subclasses choose the thread it runs on)."""
        command = self._command(launch, plan)
        try:
            log_file = open(launch.root / LOG_NAME, "wb")  # noqa: SIM115 - owned by the sandbox object
            try:
                proc = subprocess.Popen(
                    command.argv,
                    env=command.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log_file,
                    close_fds=True,
                    pass_fds=command.pass_fds,
                    start_new_session=True,
                    preexec_fn=make_preexec(plan),
                )
            except BaseException:
                log_file.close()
                raise
        finally:
            for fd in command.pass_fds:
                os.close(fd)
        return proc, log_file

    def _sandbox(
        self,
        launch: Launch,
        proc: subprocess.Popen[bytes],
        log_file: IO[bytes],
        members: Members,
        cgroup: SandboxCgroup | None,
    ) -> SandboxInstance:
        return ProcessSandbox(launch, proc, log_file, members, self._config, cgroup)

    def _make_cgroup(self, launch: Launch) -> SandboxCgroup | None:
        cgroups = self._memory.cgroups
        if cgroups is None:
            return None
        try:
            return cgroups.create(
                launch.sandbox_id, self._config.memory_mb * MiB, self._config.pids + self.helpers
            )
        except OSError as exc:
            # Probed at prepare(): failing now must not start a sandbox without its limit.
            raise SandboxError(f"cannot make the {self.name} sandbox's cgroup: {exc}") from exc

    async def spawn(self, launch: Launch) -> SandboxInstance:
        plan = await anyio.to_thread.run_sync(self._plan, launch)
        # Made here, not in a worker thread, so no cancellation can land between making it and
        # the cleanup below (a few writes to cgroupfs).
        cgroup = self._make_cgroup(launch)
        sandbox: SandboxInstance | None = None
        try:
            if cgroup is not None:
                # Recorded first: if this host dies, whoever sweeps its sandboxes removes the cgroup.
                self._state.write_meta(launch.root, cgroup.record())
                plan = replace(plan, cgroup_procs=cgroup.procs_files)
            try:
                proc, log_file = await anyio.to_thread.run_sync(self._popen, launch, plan)
            except (OSError, subprocess.SubprocessError) as exc:
                raise SandboxError(f"cannot start the {self.name} sandbox: {exc}") from exc
            members = Members(leader=proc.pid, uid=launch.owner[0] if launch.owner else None)
            sandbox = self._sandbox(launch, proc, log_file, members, cgroup)
            started = await anyio.to_thread.run_sync(lambda: psutil.Process(proc.pid).create_time())
            self._state.write_meta(launch.root, {"pid": proc.pid, "pid_started": started})
        except BaseException:
            # Cancelled or failed half-way: nothing of this sandbox may outlive the error.
            with anyio.CancelScope(shield=True):
                if sandbox is not None:
                    await sandbox.destroy()
                elif cgroup is not None:
                    await anyio.to_thread.run_sync(cgroup.remove)
            raise
        return sandbox


class ProcessSandbox:
    helpers = 0
    """Launcher processes (not the program's) that the watchdog sees among the sandbox's own."""

    def __init__(
        self,
        launch: Launch,
        proc: subprocess.Popen[bytes],
        log_file: IO[bytes],
        members: Members,
        config: SandboxConfig,
        cgroup: SandboxCgroup | None = None,
    ) -> None:
        self._launch = launch
        self._proc = proc
        self._log_file = log_file
        self._members = members
        self._config = config
        self._cgroup = cgroup
        """The kernel enforces memory and pids when set; the watchdog measures memory otherwise."""
        self._verdict: Termination | None = None
        self._destroyed = False
        self._procfs: ProcfsMeter | None = None
        """Without a cgroup: the meter the watchdog's samples go to."""
        self._meter: UsageMeter
        if cgroup is not None:
            self._meter = CgroupMeter(cgroup.paths(), cpu_fallback=lambda: tree_cpu_s(cgroup.pids()))
        else:
            self._procfs = self._meter = ProcfsMeter(proc.pid)

    @property
    def sandbox_id(self) -> str:
        return self._launch.sandbox_id

    @property
    def meter(self) -> UsageMeter:
        return self._meter

    def _log_tail(self) -> str:
        try:
            with open(self._launch.root / LOG_NAME, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
                return handle.read().decode("utf-8", errors="replace").strip()
        except OSError:
            return ""

    def _oom_killed(self) -> Termination | None:
        """The cgroup's verdict once the kernel has killed a process for its memory limit."""
        if self._cgroup is not None and self._cgroup.oom_kills() > 0:
            return cgroup_verdict(self._config, self._cgroup)
        return None

    def _check(self) -> Termination | None:
        # With a cgroup the kernel holds memory: the watchdog only counts processes.
        now = sample(self._members, memory=self._cgroup is None)
        if self._procfs is not None:
            self._procfs.saw(now.memory)
        verdict = self._oom_killed() if self._cgroup is not None else watchdog_verdict(self._config, now)
        if verdict is not None:
            return verdict
        started = len(now.pids) - self.helpers
        if started > self._config.pids:
            return Termination(
                "killed",
                "TooManyProcesses",
                f"the program started {started} processes, over the limit of {self._config.pids}, "
                "and was killed",
                cap="pids",
            )
        return None

    async def watch(self) -> Termination:
        while True:
            # Most programs finish within one interval and never pay for a scan; a scan in progress
            # is abandoned (not awaited) when the run ends.
            await anyio.sleep(WATCH_INTERVAL_S)
            verdict = await anyio.to_thread.run_sync(self._check, abandon_on_cancel=True)
            if verdict is not None:
                self._verdict = verdict
                await anyio.to_thread.run_sync(kill_members, self._members)
                return verdict

    async def exit_reason(self) -> str | None:
        code = self._proc.poll()
        if code is None:
            return None
        tail = self._log_tail()
        return f"the sandbox process exited with status {code} before connecting" + (
            f":\n{tail}" if tail else ""
        )

    async def termination(self) -> Termination:
        if self._verdict is not None:
            return self._verdict
        with contextlib.suppress(subprocess.TimeoutExpired):
            await anyio.to_thread.run_sync(lambda: self._proc.wait(timeout=2.0))
        oom = await anyio.to_thread.run_sync(self._oom_killed)
        if oom is not None:
            return oom
        code = self._proc.poll()
        if code is None:
            return Termination("sandbox", "SandboxError", "the sandbox closed its channel but kept running")
        sig = self._killed_by(code)
        if sig is not None:
            if sig == signal.SIGXCPU:
                return Termination(
                    "killed", "CpuTimeLimit", "the program exceeded its CPU-time limit and was killed", "cpu"
                )
            return Termination("killed", "Killed", f"the sandbox process was killed by {sig.name}")
        tail = self._log_tail()
        return Termination(
            "sandbox",
            "SandboxError",
            f"the sandbox runtime exited with status {code}" + (f": {tail[-500:]}" if tail else ""),
        )

    def _killed_by(self, code: int) -> signal.Signals | None:
        """The signal that ended the runtime, from its exit status (Popen: minus the signal)."""
        return signal.Signals(-code) if code < 0 else None

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        self._meter.close()  # before the cgroup is removed

        def kill() -> None:
            if not kill_members(self._members):
                log.warning("sandbox %s: processes survived the kill", self.sandbox_id)
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.wait()
            self._log_file.close()
            if self._cgroup is not None and not self._cgroup.remove():
                log.warning(
                    "sandbox %s: its cgroup %s could not be removed", self.sandbox_id, self._cgroup.dirs
                )

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(kill)
