"""The Docker backend: one hardened container per sandbox.

The hardening is in :meth:`DockerApi.run`: non-root user, all capabilities dropped,
``no-new-privileges`` with codemode's own seccomp profile (Docker's default without io_uring and
the other calls the bwrap filter denies: :mod:`codemode.sandbox._docker_seccomp`), read-only root
filesystem with a size-capped noexec tmpfs on /tmp, no network, memory == memory+swap, CPU quota,
pids limit, nofile/fsize/core ulimits, an init process, logging disabled, no host environment, and
no mount but the sandbox's own channel directory (read-only). The Docker socket is never mounted.

Containers carry labels: ``codemode.sandbox=1``; ``codemode.pool``, the id of the
:class:`SandboxManager` that started them (so a run, a test suite or an operator can find exactly
its own containers on a shared engine); the owner host process (hostname, pid, start time) and the
machine it runs on (boot id and pid namespace); the sandbox id. A container is removed as an
orphan only when its owner is provably dead: recorded on this machine, in this pid namespace, and
no process with that pid and start time runs any more. Anything else (a neighbour on the same
engine, another machine or container sharing the engine, a container of unknown origin) is left
alone, so two codemode processes never remove each other's sandboxes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import time
import uuid

import anyio

from codemode.config import SandboxConfig
from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox._backend import Launch, SandboxInstance, Termination
from codemode.sandbox._cgroup import cgroup_of_process
from codemode.sandbox._docker_api import SANDBOX_UID, ContainerSpec, DockerApi
from codemode.sandbox._docker_seccomp import docker_profile_json
from codemode.sandbox._files import runtime_digest
from codemode.sandbox._outcome import BackendName
from codemode.sandbox._program import WorkspaceQuota
from codemode.sandbox._state import HostToken, StateDir, same_process
from codemode.sandbox._usage_meter import CgroupMeter, NoMeter, UsageMeter

__all__ = ["LABEL", "POOL_ENV", "POOL_LABEL", "DockerBackend", "machine_id", "new_pool_id", "owner_is_dead"]

log = logging.getLogger("codemode.sandbox.docker")

LABEL = "codemode.sandbox"
OWNER_LABEL = "codemode.owner"
ID_LABEL = "codemode.sandbox_id"
RUNTIME_LABEL = "codemode.runtime"
POOL_LABEL = "codemode.pool"
MACHINE_LABEL = "codemode.machine"
POOL_ENV = "CODEMODE_POOL_ID"
"""Names the pool label instead of a fresh id per manager (a test suite labels all its runs)."""
INSPECT_GAP_S = (0.2, 0.8)
"""The first and the longest gap between inspects of a container that has not connected yet."""
_now = time.monotonic  # a test's clock replaces it


def new_pool_id() -> str:
    return os.environ.get(POOL_ENV, "").strip() or uuid.uuid4().hex


@functools.cache
def machine_id() -> str:
    """Where a pid means the same process as here: this kernel boot and this pid namespace.

    Two machines may share a hostname and an engine (``DOCKER_HOST``), and two containers on one
    machine share its boot id but not their pids; only when both match does a dead pid prove a
    dead owner. Without /proc (not Linux) the hostname is all there is.
    """
    parts: list[str] = []
    with contextlib.suppress(OSError):
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            parts.append(handle.read().strip())
        parts.append(os.readlink("/proc/self/ns/pid"))
    return "/".join(parts) if len(parts) == 2 else f"host={socket.gethostname()}"


def owner_is_dead(labels: dict[str, str]) -> bool:
    """Whether the host process that labelled a container is provably gone (see the module doc)."""
    token = HostToken.decode(labels.get(OWNER_LABEL, ""))
    if token is None or labels.get(MACHINE_LABEL) != machine_id():
        return False
    return token.hostname == socket.gethostname() and not same_process(token.pid, token.started)


class DockerBackend:
    def __init__(
        self,
        config: SandboxConfig,
        state: StateDir,
        api: DockerApi,
        *,
        workspace: WorkspaceQuota | None = None,
    ) -> None:
        self._config = config
        self._workspace = workspace
        self._state = state
        self._api = api
        self._root = os.geteuid() == 0
        self.pool_id = new_pool_id()
        """The ``codemode.pool`` label of this backend's containers (the manager sets its own)."""
        self._told_no_usage = False

    @property
    def name(self) -> BackendName:
        return "docker"

    def isolation(self) -> str:
        return (
            "docker backend: non-root container, no capabilities, no-new-privileges + codemode's "
            "seccomp profile (no io_uring, ptrace or namespaces), read-only root, no network, "
            "memory/CPU/pids limits"
        )

    async def prepare(self) -> None:
        docker_profile_json()  # no profile for this architecture: refuse here, before any container
        self._state.ensure()
        image = await anyio.to_thread.run_sync(self._api.image, self._config.image)
        if image is None:
            raise SandboxUnavailableError(
                f"the sandbox image {self._config.image!r} is not built; run `codemode sandbox build`"
            )
        if image[1].get(RUNTIME_LABEL) not in (None, runtime_digest()):
            log.warning(
                "the sandbox image %s was built from another version of the runtime; "
                "run `codemode sandbox build` to update it",
                self._config.image,
            )
        await anyio.to_thread.run_sync(self._cleanup_orphans)

    def _cleanup_orphans(self) -> None:
        for container_id, labels in self._api.labelled(f"{LABEL}=1"):
            if owner_is_dead(labels):
                log.info(
                    "removing orphaned sandbox container %s (owner %s is gone)",
                    container_id[:12],
                    labels.get(OWNER_LABEL),
                )
                try:
                    self._api.remove(container_id)
                except SandboxError as exc:  # e.g. another host's sweep removed it at the same time
                    log.warning("could not remove orphaned container %s: %s", container_id[:12], exc)
        for root, meta in self._state.orphans():
            if meta.get("backend") == "docker":
                self._state.remove(root)

    def new_launch(self) -> Launch:
        sandbox_id, root = self._state.new_sandbox("docker")
        owner = (SANDBOX_UID, SANDBOX_UID) if self._root else None
        return Launch(sandbox_id=sandbox_id, root=root, channel_dir=root / "ch", owner=owner)

    async def spawn(self, launch: Launch) -> SandboxInstance:
        config, ws = self._config, self._workspace
        spec = ContainerSpec(
            image=config.image,
            channel_dir=str(launch.channel_dir),
            labels={
                LABEL: "1",
                POOL_LABEL: self.pool_id,
                OWNER_LABEL: self._state.token.encode(),
                MACHINE_LABEL: machine_id(),
                ID_LABEL: launch.sandbox_id,
            },
            memory_mb=config.memory_mb,
            cpus=config.cpus,
            pids=config.pids,
            nofile=config.nofile,
            tmpfs_mb=config.tmpfs_mb,
            seccomp_profile=docker_profile_json(),
            workspace=None if ws is None else (ws.tmpfs_bytes, ws.files + 1),
        )
        container_id = await self._start_container(spec)
        self._state.write_meta(launch.root, {"container": container_id})
        sandbox = DockerSandbox(launch, container_id, self._api, config)
        try:
            sandbox.meter = await anyio.to_thread.run_sync(self._meter_for, container_id)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await sandbox.destroy()
            raise
        return sandbox

    def _meter_for(self, container_id: str) -> UsageMeter:
        """The container's cgroup counters, when this host can see them (a local engine); found
        once per container, while the pool fills, not when a run starts."""
        try:
            state = self._api.state(container_id)
        except SandboxError as exc:
            log.debug("no usage for container %s: %s", container_id[:12], exc)
            return NoMeter()
        paths = cgroup_of_process(state.pid, container_id) if state is not None and state.pid else None
        if paths is None:
            if not self._told_no_usage:
                self._told_no_usage = True
                log.info(
                    "sandbox CPU and memory per run are not measured: this host cannot see the "
                    "containers' cgroups (is the Docker engine on another machine?)"
                )
            return NoMeter()
        return CgroupMeter(paths)

    async def _start_container(self, spec: ContainerSpec) -> str:
        # Shielded: a cancellation (SIGTERM, a closing manager) during `docker run` would drop the
        # id of a container that then starts anyway, and nothing would remove it.
        with anyio.CancelScope(shield=True):
            return await anyio.to_thread.run_sync(self._api.run, spec)
        raise AssertionError("unreachable")  # pyright cannot see that a shielded scope swallows nothing


class DockerSandbox:
    def __init__(self, launch: Launch, container_id: str, api: DockerApi, config: SandboxConfig) -> None:
        self._launch = launch
        self._id = container_id
        self._api = api
        self._config = config
        self._destroyed = False
        self.meter: UsageMeter = NoMeter()
        """Set once the container's cgroup is found (see ``DockerBackend.spawn``)."""
        # Spawn inspects the container right after this (for its cgroup): the first ask of
        # exit_reason waits one gap.
        self._inspect_gap_s = INSPECT_GAP_S[0]
        self._next_inspect = _now() + self._inspect_gap_s

    @property
    def sandbox_id(self) -> str:
        return self._launch.sandbox_id

    @property
    def container_id(self) -> str:
        return self._id

    async def watch(self) -> Termination:
        # The kernel enforces every limit of a container (cgroups, ulimits); nothing to poll.
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def exit_reason(self) -> str | None:
        # Asked every 0.1 s until the runtime connects, and each answer is an inspect through the
        # Docker API (a worker thread and an HTTP round trip): on a busy host, where a container
        # takes seconds to connect, that was ~9 ms of serve's CPU per run. The engine is asked at
        # growing gaps instead, so a container that died is still reported within the last gap.
        now = _now()
        if now < self._next_inspect:
            return None
        self._next_inspect = now + self._inspect_gap_s
        self._inspect_gap_s = min(self._inspect_gap_s * 2, INSPECT_GAP_S[1])
        state = await anyio.to_thread.run_sync(self._api.state, self._id)
        if state is None:
            return "the sandbox container disappeared before connecting"
        if state.running or state.status == "created":
            return None
        return (
            f"the sandbox container exited with status {state.exit_code} before connecting "
            f"(check the image with `codemode sandbox doctor`)"
        )

    async def termination(self) -> Termination:
        await anyio.to_thread.run_sync(self._api.wait, self._id, 5.0)
        state = await anyio.to_thread.run_sync(self._api.state, self._id)
        if state is None:
            return Termination("sandbox", "SandboxError", "the sandbox container disappeared")
        if state.oom_killed:
            return Termination(
                "oom",
                "OutOfMemory",
                f"the program ran out of memory (limit {self._config.memory_mb} MiB) and was killed",
                "memory",
            )
        if state.running:
            return Termination("sandbox", "SandboxError", "the sandbox closed its channel but kept running")
        if state.exit_code == 137:
            return Termination("killed", "Killed", "the sandbox was killed (SIGKILL)")
        return Termination(
            "sandbox", "SandboxError", f"the sandbox runtime exited with status {state.exit_code}"
        )

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        self.meter.close()
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(self._api.remove, self._id)
            except SandboxError as exc:
                log.warning("could not remove sandbox container %s: %s", self._id[:12], exc)
