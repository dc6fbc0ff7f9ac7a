"""The only module that touches docker-py (untyped): a small, typed facade over its low-level API.

Every call here blocks; callers run them in worker threads. docker-py and requests exceptions are
mapped to :class:`SandboxError` / :class:`SandboxUnavailableError` at this seam.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox import _wire as wire

__all__ = ["ContainerSpec", "ContainerState", "DockerApi", "EngineInfo", "docker_api"]

CHANNEL_MOUNT = wire.CHANNEL_DIR
SANDBOX_USER = "10001:10001"
SANDBOX_UID = 10001


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    channel_dir: str
    labels: dict[str, str]
    memory_mb: int
    cpus: float
    pids: int
    nofile: int
    tmpfs_mb: int
    seccomp_profile: str
    """The seccomp profile as JSON (see :mod:`codemode.sandbox._docker_seccomp`); required, so that
    no container starts under the engine's default profile by omission."""
    workspace: tuple[int, int] | None = None
    """A private tmpfs at ``/workspace``: (size in bytes, inodes); None: no workspace."""


@dataclass(frozen=True)
class ContainerState:
    status: str
    running: bool
    exit_code: int
    oom_killed: bool
    pid: int = 0
    """The container's first process as the engine sees it (0 when it is not running)."""


@dataclass(frozen=True)
class EngineInfo:
    server_version: str
    api_version: str
    cgroup_version: str
    seccomp: bool
    memory_limit: bool
    swap_limit: bool
    pids_limit: bool
    cpu_quota: bool
    security_options: tuple[str, ...] = field(default=())


def _docker_errors() -> tuple[type[BaseException], ...]:
    import docker.errors
    import requests.exceptions

    return (docker.errors.DockerException, requests.exceptions.RequestException)


_REMOVE_ATTEMPTS = 8
_REMOVAL_RACES = ("already in progress", "is not running", "Could not kill")


class DockerApi:
    """A connection to the Docker engine named by the environment (``DOCKER_HOST`` or the socket)."""

    def __init__(self, timeout: float = 60.0) -> None:
        try:
            import docker

            client: Any = docker.from_env(timeout=int(timeout))
        except ImportError as exc:  # pragma: no cover - docker is a dependency
            raise SandboxUnavailableError("the 'docker' Python package is not installed") from exc
        except Exception as exc:
            raise SandboxUnavailableError(f"no Docker engine answers: {_short(exc)}") from exc
        self._client: Any = client
        self._api: Any = client.api
        if str(self._api.base_url).startswith("http+docker://"):
            # A local socket: no proxy, netrc or CA bundle from the environment can apply, yet
            # requests looks them all up again on every API call (a run makes several).
            self._api.trust_env = False
        self._errors = _docker_errors()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.close()

    def _fail(self, what: str, exc: BaseException) -> SandboxError:
        return SandboxError(f"docker: {what} failed: {_short(exc)}")

    # -- engine ----------------------------------------------------------------------------

    def ping(self) -> None:
        try:
            self._api.ping()
        except self._errors as exc:
            raise SandboxUnavailableError(f"the Docker engine does not answer: {_short(exc)}") from exc

    def info(self) -> EngineInfo:
        try:
            info = cast(dict[str, Any], self._api.info())
            version = cast(dict[str, Any], self._api.version())
        except self._errors as exc:
            raise self._fail("info", exc) from exc
        options = tuple(str(item) for item in cast(list[Any], info.get("SecurityOptions") or []))
        return EngineInfo(
            server_version=str(version.get("Version", "?")),
            api_version=str(version.get("ApiVersion", "?")),
            cgroup_version=str(info.get("CgroupVersion", "1")),
            seccomp=any("name=seccomp" in item for item in options),
            memory_limit=bool(info.get("MemoryLimit", False)),
            swap_limit=bool(info.get("SwapLimit", False)),
            pids_limit=bool(info.get("PidsLimit", False)),
            cpu_quota=bool(info.get("CpuCfsQuota", False)),
            security_options=options,
        )

    # -- images ----------------------------------------------------------------------------

    def image(self, name: str) -> tuple[str, dict[str, str]] | None:
        """``(image id, labels)`` of a local image, or None when it is not present."""
        import docker.errors

        try:
            data = cast(dict[str, Any], self._api.inspect_image(name))
        except docker.errors.ImageNotFound:
            return None
        except self._errors as exc:
            raise self._fail(f"inspecting image {name}", exc) from exc
        config = cast(dict[str, Any], data.get("Config") or {})
        labels = cast(dict[str, Any], config.get("Labels") or {})
        return str(data.get("Id", "")), {str(k): str(v) for k, v in labels.items()}

    def pull(self, name: str) -> str | None:
        """Pull ``name``; return None on success, else the engine's reason (no registry, no image …)."""
        repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
        try:
            for line in self._api.pull(repository, tag=tag or "latest", stream=True, decode=True):
                item = cast(dict[str, Any], line)
                if "error" in item:
                    return str(item["error"])
        except self._errors as exc:
            return _short(exc)
        return None

    def import_stream(self, stream: IO[bytes], repository: str, tag: str) -> None:
        """``docker import``: a root filesystem tarball read from ``stream`` becomes an image."""
        try:
            self._api.import_image_from_stream(stream, repository=repository, tag=tag)
        except self._errors as exc:
            raise self._fail(f"importing {repository}:{tag}", exc) from exc

    def remove_image(self, image_id: str) -> bool:
        """Remove an image nothing uses any more (an old build); False when it cannot be removed."""
        try:
            self._api.remove_image(image_id)
        except self._errors:
            return False
        return True

    def build(
        self, context: Path, tag: str, buildargs: dict[str, str], labels: dict[str, str]
    ) -> Iterator[str]:
        """Build ``context/Dockerfile`` without pulling; yield the engine's progress lines."""
        try:
            stream = self._api.build(
                path=str(context),
                tag=tag,
                buildargs=buildargs,
                labels=labels,
                pull=False,
                rm=True,
                forcerm=True,
                decode=True,
            )
            for line in stream:
                item = cast(dict[str, Any], line)
                if "error" in item:
                    detail = cast(dict[str, Any], item.get("errorDetail") or {})
                    raise SandboxError(f"docker build failed: {detail.get('message') or item['error']}")
                text = item.get("stream")
                if isinstance(text, str) and text.strip():
                    yield text.rstrip()
        except self._errors as exc:
            raise self._fail("build", exc) from exc

    # -- containers ------------------------------------------------------------------------

    def run(self, spec: ContainerSpec) -> str:
        """Create and start a hardened sandbox container; return its id."""
        from docker.types import LogConfig, Ulimit

        fsize = spec.tmpfs_mb * 1024 * 1024
        try:
            host_config = self._api.create_host_config(
                binds={spec.channel_dir: {"bind": CHANNEL_MOUNT, "mode": "ro"}},
                cap_drop=["ALL"],
                # The engine reads an inline profile (what `docker run --security-opt seccomp=FILE`
                # sends); one it cannot load fails the create, so no container runs without it.
                security_opt=["no-new-privileges", f"seccomp={spec.seccomp_profile}"],
                read_only=True,
                tmpfs=_tmpfs_mounts(spec),
                shm_size=f"{min(spec.tmpfs_mb, 64)}m",
                network_mode="none",
                mem_limit=f"{spec.memory_mb}m",
                memswap_limit=f"{spec.memory_mb}m",  # memory == memory + swap: no swapping out of the limit
                nano_cpus=int(spec.cpus * 1e9),
                pids_limit=spec.pids,
                ulimits=[
                    Ulimit(name="nofile", soft=spec.nofile, hard=spec.nofile),
                    Ulimit(name="fsize", soft=fsize, hard=fsize),
                    Ulimit(name="core", soft=0, hard=0),
                ],
                init=True,
                ipc_mode="private",
                log_config=LogConfig(type="none"),  # output never reaches the host's disk
            )
            created = cast(
                dict[str, Any],
                self._api.create_container(
                    spec.image,
                    user=SANDBOX_USER,
                    labels=spec.labels,
                    host_config=host_config,
                    network_disabled=True,
                    working_dir="/tmp",  # noqa: S108 - the container's private tmpfs
                    hostname="sandbox",
                    environment=_environment(spec),
                ),
            )
        except self._errors as exc:
            raise self._fail(f"creating a container from {spec.image}", exc) from exc
        container_id = str(created["Id"])
        try:
            self._api.start(container_id)
        except self._errors as exc:
            self.remove(container_id)
            raise self._fail("starting the container", exc) from exc
        return container_id

    def state(self, container_id: str) -> ContainerState | None:
        import docker.errors

        try:
            data = cast(dict[str, Any], self._api.inspect_container(container_id))
        except docker.errors.NotFound:
            return None
        except self._errors as exc:
            raise self._fail("inspecting the container", exc) from exc
        state = cast(dict[str, Any], data.get("State") or {})
        return ContainerState(
            status=str(state.get("Status", "")),
            running=bool(state.get("Running", False)),
            exit_code=int(state.get("ExitCode", 0) or 0),
            oom_killed=bool(state.get("OOMKilled", False)),
            pid=int(state.get("Pid", 0) or 0),
        )

    def wait(self, container_id: str, timeout: float) -> None:
        with contextlib.suppress(*self._errors):
            self._api.wait(container_id, timeout=timeout)

    def remove(self, container_id: str) -> None:
        """Kill and remove; a container that is already gone is fine.

        Docker 20.10 races when a container exits while it is being force-removed ("Could not kill
        running container … is not running") and can leave it stuck in "Removal In Progress";
        another removal attempt clears it. So such answers are retried (briefly) until it is gone.
        """
        import docker.errors

        for attempt in range(1, _REMOVE_ATTEMPTS + 1):
            try:
                self._api.remove_container(container_id, force=True, v=True)
                return
            except docker.errors.NotFound:
                return
            except self._errors as exc:
                raced = isinstance(exc, docker.errors.APIError) and any(
                    sign in str(exc) for sign in _REMOVAL_RACES
                )
                if not raced or attempt == _REMOVE_ATTEMPTS:
                    raise self._fail("removing the container", exc) from exc
                time.sleep(0.1 * attempt)

    def labelled(self, label: str, *more: str) -> list[tuple[str, dict[str, str]]]:
        """All containers (running or not) carrying every label given (``key=value`` or ``key``)."""
        try:
            items = cast(
                list[dict[str, Any]], self._api.containers(all=True, filters={"label": [label, *more]})
            )
        except self._errors as exc:
            raise self._fail("listing containers", exc) from exc
        out: list[tuple[str, dict[str, str]]] = []
        for item in items:
            labels = cast(dict[str, Any], item.get("Labels") or {})
            out.append((str(item["Id"]), {str(k): str(v) for k, v in labels.items()}))
        return out


def _environment(spec: ContainerSpec) -> dict[str, str]:
    # /tmp and /dev/shm are this container's own mounts: a fresh run finds them empty.
    env = {wire.SCRATCH_DIRS_ENV: "/tmp:/dev/shm"}  # noqa: S108
    if spec.workspace is not None:
        env[wire.WORKSPACE_DIR_ENV] = wire.WORKSPACE_DIR
    return env


def _tmpfs_mounts(spec: ContainerSpec) -> dict[str, str]:
    mounts = {"/tmp": f"rw,nosuid,nodev,noexec,size={spec.tmpfs_mb}m,mode=1777"}  # noqa: S108
    if spec.workspace is not None:
        # Sized to the quota, so a write past it fails in the program (ENOSPC), and private to the
        # sandbox user: a fresh mount per container, holding only the run's own workspace.
        size, inodes = spec.workspace
        mounts[wire.WORKSPACE_DIR] = (
            f"rw,nosuid,nodev,noexec,size={size},nr_inodes={inodes},mode=0700,uid={SANDBOX_UID},gid={SANDBOX_UID}"
        )
    return mounts


def _short(exc: BaseException) -> str:
    # docker-py's APIError keeps the engine's own message in ``explanation``.
    explanation = getattr(exc, "explanation", None)
    text = (explanation if isinstance(explanation, str) and explanation else str(exc)) or type(exc).__name__
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict) and "message" in data:
            text = str(cast(dict[str, Any], data)["message"])
    return text.splitlines()[0][:300] if text else type(exc).__name__


def docker_api(timeout: float = 60.0) -> DockerApi:
    """Connect to the engine (raises :class:`SandboxUnavailableError` when none answers)."""
    api = DockerApi(timeout)
    api.ping()
    return api
