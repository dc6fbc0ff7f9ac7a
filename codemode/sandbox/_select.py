"""Which backend runs programs: ``docker``, ``process``, or ``auto`` (Docker when usable, and why)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import anyio

from codemode.config import SandboxConfig
from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox._backend import Backend
from codemode.sandbox._docker import DockerBackend
from codemode.sandbox._docker_api import DockerApi, docker_api
from codemode.sandbox._outcome import BackendName
from codemode.sandbox._process import ProcessBackend
from codemode.sandbox._state import StateDir

__all__ = ["BackendInfo", "choose_backend", "open_backend"]


@dataclass(frozen=True)
class BackendInfo:
    name: BackendName
    reason: str
    """Why this backend: asked for explicitly, or what ``auto`` found."""
    isolation: str = ""
    """What the backend isolates (filled in once the backend is prepared)."""


async def _docker_status(config: SandboxConfig) -> tuple[DockerApi | None, str]:
    """``(api, why)``: api is None when Docker cannot be used, with the reason and the fix."""
    try:
        api = await anyio.to_thread.run_sync(docker_api, 10.0)
    except SandboxUnavailableError as exc:
        return None, f"{exc} (start dockerd, or install Docker)"
    try:
        image = await anyio.to_thread.run_sync(api.image, config.image)
    except SandboxError as exc:
        api.close()
        return None, str(exc)
    if image is None:
        api.close()
        return (
            None,
            f"the Docker engine answers but image {config.image!r} is missing (run `codemode sandbox build`)",
        )
    return api, f"the Docker engine answers and image {config.image!r} is present"


async def _resolve(config: SandboxConfig) -> tuple[BackendInfo, DockerApi | None]:
    """What ``config.backend`` resolves to here, with the open engine connection when it is docker."""
    if config.backend == "process":
        return BackendInfo("process", "configured: backend = process"), None
    api, why = await _docker_status(config)
    if api is not None:
        reason = why if config.backend == "auto" else "configured: backend = docker"
        return BackendInfo("docker", reason), api
    if config.backend == "docker":
        raise SandboxUnavailableError(f"backend = docker, but {why}")
    return BackendInfo("process", f"auto: {why}; using the (weaker) process backend"), None


async def choose_backend(config: SandboxConfig) -> BackendInfo:
    """The backend ``config.backend`` resolves to on this machine, without starting anything."""
    info, api = await _resolve(config)
    if api is not None:
        api.close()
    return info


async def open_backend(
    config: SandboxConfig, state: StateDir
) -> tuple[Backend, BackendInfo, DockerApi | None]:
    """Resolve and prepare the backend (orphan cleanup included)."""
    info, api = await _resolve(config)
    backend: Backend = DockerBackend(config, state, api) if api is not None else ProcessBackend(config, state)
    try:
        await backend.prepare()
    except BaseException:
        if api is not None:
            api.close()
        raise
    return backend, replace(info, isolation=backend.isolation()), api
