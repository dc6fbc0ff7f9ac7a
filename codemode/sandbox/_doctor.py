"""``codemode sandbox doctor``: what this machine offers each backend, and how to fix what is missing."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Literal

import anyio

from codemode.config import SandboxConfig
from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox._docker import RUNTIME_LABEL
from codemode.sandbox._docker_api import DockerApi, docker_api
from codemode.sandbox._files import runtime_digest
from codemode.sandbox._linux import namespaces_supported
from codemode.sandbox._process import describe_isolation, pick_interpreter
from codemode.sandbox._select import BackendInfo, choose_backend

__all__ = ["Check", "DoctorReport", "doctor"]

Status = Literal["ok", "warn", "fail", "info"]

START_ENGINE = (
    "start the engine: `dockerd --bridge=none --iptables=false &` (or `systemctl start docker`); "
    "install it with `apt-get install docker.io`"
)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class DoctorReport:
    checks: tuple[Check, ...]
    backend: BackendInfo | None
    """What ``backend`` in the config resolves to here (None when it cannot run at all)."""
    backend_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.backend is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "backend": asdict(self.backend) if self.backend else None,
            "backend_error": self.backend_error,
            "checks": [asdict(check) for check in self.checks],
        }


def _docker_checks(config: SandboxConfig, api: DockerApi) -> list[Check]:
    checks: list[Check] = []
    info = api.info()
    checks.append(
        Check("docker engine", "ok", f"Docker {info.server_version} (API {info.api_version}) answers")
    )
    image = api.image(config.image)
    if image is None:
        checks.append(
            Check("sandbox image", "fail", f"{config.image} is not built", "codemode sandbox build")
        )
    elif image[1].get(RUNTIME_LABEL) not in (None, runtime_digest()):
        checks.append(
            Check(
                "sandbox image",
                "warn",
                f"{config.image} was built from another version of the runtime",
                "codemode sandbox build",
            )
        )
    else:
        checks.append(Check("sandbox image", "ok", f"{config.image} ({image[0][:19]})"))
    checks.append(
        Check("seccomp", "ok", "default seccomp profile applies to containers")
        if info.seccomp
        else Check(
            "seccomp", "fail", "the engine has no seccomp support", "use a Docker engine built with seccomp"
        )
    )
    checks.append(Check("cgroups", "info", f"cgroup v{info.cgroup_version}"))
    checks.append(
        Check("memory limit", "ok", f"enforced ({config.memory_mb} MiB per sandbox)")
        if info.memory_limit
        else Check(
            "memory limit", "fail", "the kernel does not support memory limits", "enable the memory cgroup"
        )
    )
    checks.append(
        Check("memory+swap limit", "ok", "swap is capped at the memory limit")
        if info.swap_limit
        else Check(
            "memory+swap limit",
            "warn",
            "swap accounting is off: a sandbox could swap beyond its memory limit",
            "boot the kernel with `swapaccount=1` (cgroup v1) or use cgroup v2",
        )
    )
    checks.append(
        Check("pids limit", "ok", f"enforced ({config.pids} per sandbox)")
        if info.pids_limit
        else Check("pids limit", "fail", "the kernel does not support pids limits", "enable the pids cgroup")
    )
    checks.append(
        Check("cpu quota", "ok", f"enforced ({config.cpus:g} CPUs per sandbox)")
        if info.cpu_quota
        else Check(
            "cpu quota",
            "warn",
            "CFS quota unsupported: CPU share is not limited",
            "enable CFS bandwidth control",
        )
    )
    return checks


def _process_checks(config: SandboxConfig) -> list[Check]:
    checks: list[Check] = []
    root = os.geteuid() == 0
    try:
        python = pick_interpreter(config.process_python, for_other_uid=root)
        checks.append(Check("process: interpreter", "ok", python))
    except SandboxUnavailableError as exc:
        checks.append(Check("process: interpreter", "fail", str(exc), "set [sandbox] process_python"))
    namespaces = namespaces_supported(not root)
    checks.append(
        Check(
            "process: isolation",
            "fail" if root and not namespaces else "warn",
            describe_isolation(root=root, namespaces=namespaces),
            "use the docker backend for untrusted code"
            if root
            else "run as root, or use the docker backend for untrusted code",
        )
    )
    return checks


async def doctor(config: SandboxConfig) -> DoctorReport:
    """Inspect the engine, the image, limit support and the process backend; never raises for them."""
    checks: list[Check] = []
    try:
        api = await anyio.to_thread.run_sync(docker_api, 10.0)
    except SandboxUnavailableError as exc:
        checks.append(Check("docker engine", "fail", str(exc), START_ENGINE))
    else:
        try:
            checks += await anyio.to_thread.run_sync(_docker_checks, config, api)
        except SandboxError as exc:
            checks.append(Check("docker engine", "fail", str(exc), START_ENGINE))
        finally:
            api.close()
    checks += await anyio.to_thread.run_sync(_process_checks, config)
    try:
        backend = await choose_backend(config)
    except SandboxError as exc:
        checks.append(Check("backend", "fail", f"backend = {config.backend}: {exc}"))
        return DoctorReport(tuple(checks), None, str(exc))
    checks.append(Check("backend", "info", f"{config.backend} → {backend.name}: {backend.reason}"))
    return DoctorReport(tuple(checks), backend)
