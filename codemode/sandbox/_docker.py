"""The Docker backend: one hardened container per sandbox.

The hardening is in :meth:`DockerApi.run`: non-root user, all capabilities
dropped, ``no-new-privileges`` with the default seccomp profile, read-only root filesystem with a
size-capped noexec tmpfs on /tmp, no network, memory == memory+swap, CPU quota, pids limit,
nofile/fsize/core ulimits, an init process, logging disabled, no host environment, and no mount
but the sandbox's own channel directory (read-only). The Docker socket is never mounted.

Containers carry labels (``codemode.sandbox=1``, the owner host process, the sandbox id) so the
ones a crashed host left behind are found and removed when the next host starts.
"""

from __future__ import annotations

import logging
import os

import anyio

from codemode.config import SandboxConfig
from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox._backend import Launch, SandboxInstance, Termination
from codemode.sandbox._docker_api import SANDBOX_UID, ContainerSpec, DockerApi
from codemode.sandbox._files import runtime_digest
from codemode.sandbox._outcome import BackendName
from codemode.sandbox._state import HostToken, StateDir

__all__ = ["LABEL", "DockerBackend"]

log = logging.getLogger("codemode.sandbox.docker")

LABEL = "codemode.sandbox"
OWNER_LABEL = "codemode.owner"
ID_LABEL = "codemode.sandbox_id"
RUNTIME_LABEL = "codemode.runtime"


class DockerBackend:
    def __init__(self, config: SandboxConfig, state: StateDir, api: DockerApi) -> None:
        self._config = config
        self._state = state
        self._api = api
        self._root = os.geteuid() == 0

    @property
    def name(self) -> BackendName:
        return "docker"

    def isolation(self) -> str:
        return (
            "docker backend: non-root container, no capabilities, no-new-privileges + seccomp, "
            "read-only root, no network, memory/CPU/pids limits"
        )

    async def prepare(self) -> None:
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
            token = HostToken.decode(labels.get(OWNER_LABEL, ""))
            if token is None or not token.alive():
                log.info("removing orphaned sandbox container %s", container_id[:12])
                self._api.remove(container_id)
        for root, meta in self._state.orphans():
            if meta.get("backend") == "docker":
                self._state.remove(root)

    def new_launch(self) -> Launch:
        sandbox_id, root = self._state.new_sandbox("docker")
        owner = (SANDBOX_UID, SANDBOX_UID) if self._root else None
        return Launch(sandbox_id=sandbox_id, root=root, channel_dir=root / "ch", owner=owner)

    async def spawn(self, launch: Launch) -> SandboxInstance:
        config = self._config
        spec = ContainerSpec(
            image=config.image,
            channel_dir=str(launch.channel_dir),
            labels={
                LABEL: "1",
                OWNER_LABEL: self._state.token.encode(),
                ID_LABEL: launch.sandbox_id,
            },
            memory_mb=config.memory_mb,
            cpus=config.cpus,
            pids=config.pids,
            nofile=config.nofile,
            tmpfs_mb=config.tmpfs_mb,
        )
        container_id = await anyio.to_thread.run_sync(self._api.run, spec)
        self._state.write_meta(launch.root, {"container": container_id})
        return DockerSandbox(launch, container_id, self._api, config)


class DockerSandbox:
    def __init__(self, launch: Launch, container_id: str, api: DockerApi, config: SandboxConfig) -> None:
        self._launch = launch
        self._id = container_id
        self._api = api
        self._config = config
        self._destroyed = False

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
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(self._api.remove, self._id)
            except SandboxError as exc:
                log.warning("could not remove sandbox container %s: %s", self._id[:12], exc)
