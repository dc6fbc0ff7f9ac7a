"""Which backend runs programs: ``docker``, ``bwrap``, ``process``, or ``auto``, and why.

``auto`` takes the strongest backend that works here: Docker (an engine answers and the image is
built), else bubblewrap (``bwrap`` is installed and a test sandbox starts), else the process
backend, which is much weaker and is logged as a warning whenever it is in force.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import anyio

from codemode.config import SandboxConfig
from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox._backend import Backend, BackendFactory
from codemode.sandbox._bwrap import BwrapBackend, Layout, probe_bwrap
from codemode.sandbox._docker import DockerBackend
from codemode.sandbox._docker_api import DockerApi, docker_api
from codemode.sandbox._outcome import BackendName
from codemode.sandbox._process import ProcessBackend
from codemode.sandbox._program import WorkspaceQuota
from codemode.sandbox._state import StateDir

__all__ = ["PROCESS_WARNING", "BackendInfo", "choose_backend", "open_backend"]

log = logging.getLogger("codemode.sandbox")

PROCESS_WARNING = (
    "the process backend is in force: programs run with rlimits and a watchdog only, and can read "
    "world-readable host files and see host processes; install bubblewrap (apt-get install bubblewrap) "
    "or Docker for real isolation"
)


@dataclass(frozen=True)
class BackendInfo:
    name: BackendName
    reason: str
    """Why this backend: asked for explicitly, or what ``auto`` found."""
    isolation: str = ""
    """What the backend isolates (filled in once the backend is prepared)."""
    warning: str | None = None
    """Set when the backend in force is the weak last resort (``process``)."""


@dataclass(frozen=True)
class _Resolved:
    info: BackendInfo
    api: DockerApi | None = None
    layout: Layout | None = None


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


def _process(reason: str) -> _Resolved:
    return _Resolved(BackendInfo("process", reason, warning=PROCESS_WARNING))


async def _resolve(config: SandboxConfig, state: StateDir | None) -> _Resolved:
    """What ``config.backend`` resolves to here, with what was opened or probed on the way."""
    choice = config.backend
    if choice == "process":
        return _process("configured: backend = process (the weakest backend, an explicit last resort)")
    if choice == "bwrap":
        layout, why = await anyio.to_thread.run_sync(probe_bwrap, config, state)
        if layout is None:
            raise SandboxUnavailableError(f"backend = bwrap, but {why}")
        return _Resolved(BackendInfo("bwrap", "configured: backend = bwrap"), layout=layout)
    api, docker_why = await _docker_status(config)
    if api is not None:
        reason = docker_why if choice == "auto" else "configured: backend = docker"
        return _Resolved(BackendInfo("docker", reason), api=api)
    if choice == "docker":
        raise SandboxUnavailableError(f"backend = docker, but {docker_why}")
    layout, bwrap_why = await anyio.to_thread.run_sync(probe_bwrap, config, state)
    if layout is not None:
        return _Resolved(BackendInfo("bwrap", f"auto: {docker_why}; {bwrap_why}"), layout=layout)
    return _process(f"auto: {docker_why}; {bwrap_why}; falling back to the (much weaker) process backend")


async def choose_backend(config: SandboxConfig) -> BackendInfo:
    """The backend ``config.backend`` resolves to on this machine, without keeping anything open."""
    resolved = await _resolve(config, None)
    if resolved.api is not None:
        resolved.api.close()
    return resolved.info


async def open_backend(
    config: SandboxConfig,
    state: StateDir,
    *,
    factory: BackendFactory | None = None,
    workspace: WorkspaceQuota | None = None,
) -> tuple[Backend, BackendInfo, DockerApi | None]:
    """Resolve and prepare the backend (orphan cleanup included).

    ``factory`` (a test seam) builds the backend instead, whatever ``config.backend`` says (its
    sandboxes have no workspace). ``workspace``: give every sandbox one, of that quota.
    """
    if factory is not None:
        injected = factory(config, state)
        await injected.prepare()
        info = BackendInfo(injected.name, "injected by the caller (a test seam)", injected.isolation())
        return injected, info, None
    resolved = await _resolve(config, state)
    api = resolved.api
    backend: Backend
    if api is not None:
        backend = DockerBackend(config, state, api, workspace=workspace)
    elif resolved.info.name == "bwrap":
        backend = BwrapBackend(config, state, resolved.layout, workspace=workspace)
    else:
        backend = ProcessBackend(config, state, workspace=workspace)
    try:
        await backend.prepare()
    except BaseException:
        if api is not None:
            api.close()
        raise
    if resolved.info.warning:
        log.warning("%s", resolved.info.warning)
    return backend, replace(resolved.info, isolation=backend.isolation()), api
