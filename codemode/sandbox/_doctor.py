"""``codemode sandbox doctor``: what this machine offers each backend, what each enforces, which one
is in force, and how to fix what is missing."""

from __future__ import annotations

import os
import subprocess
from dataclasses import asdict, dataclass
from typing import Any, Literal

import anyio

from codemode.config import SandboxConfig
from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox._bwrap import describe_bwrap, find_bwrap, probe_bwrap
from codemode.sandbox._docker import RUNTIME_LABEL, DockerBackend
from codemode.sandbox._docker_api import DockerApi, docker_api
from codemode.sandbox._docker_seccomp import profile_summary
from codemode.sandbox._files import runtime_digest
from codemode.sandbox._linux import namespaces_supported
from codemode.sandbox._memory_limit import MemoryLimit, choose_memory_limit
from codemode.sandbox._process import describe_isolation, pick_interpreter
from codemode.sandbox._seccomp import DENIED, current_arch
from codemode.sandbox._select import BackendInfo, choose_backend
from codemode.sandbox._state import StateDir

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
        Check("seccomp", "ok", f"in force in every sandbox container: {profile_summary()}")
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
    checks.append(Check("docker: enforces", "info", DockerBackend(config, StateDir(), api).isolation()))
    return checks


def _memory_check(backend: str, memory: MemoryLimit) -> Check:
    """Which memory enforcement a backend has here: a kernel cgroup, or the watchdog fallback."""
    if memory.cgroups is not None:
        return Check(f"{backend}: memory limit", "ok", f"{memory.mode}: {memory.describe()}")
    return Check(
        f"{backend}: memory limit",
        "warn",
        f"{memory.mode}: {memory.describe()}",
        "run codemode as root or in a cgroup v2 subtree with memory and pids delegated, and keep "
        '[sandbox] cgroups = "auto"',
    )


def _bwrap_checks(config: SandboxConfig) -> list[Check]:
    path = find_bwrap()
    if path is None:
        return [
            Check(
                "bwrap",
                "warn",
                "bubblewrap is not installed: without Docker, only the much weaker process backend is left",
                "apt-get install bubblewrap",
            )
        ]
    try:
        version = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        version = f"(--version failed: {exc})"
    checks = [Check("bwrap", "ok", f"{path}: {version}")]
    try:
        arch = current_arch()
        checks.append(
            Check("bwrap: seccomp", "ok", f"filter for {arch.name}: {len(DENIED)} system calls denied")
        )
    except SandboxUnavailableError as exc:
        checks.append(Check("bwrap: seccomp", "fail", str(exc), "use the docker backend on this machine"))
        return checks
    layout, why = probe_bwrap(config)
    checks.append(
        Check("bwrap: test sandbox", "ok", why)
        if layout is not None
        else Check(
            "bwrap: test sandbox",
            "fail",
            why,
            "allow unprivileged user namespaces (sysctl -w user.max_user_namespaces=15000; on Ubuntu also "
            "kernel.apparmor_restrict_unprivileged_userns=0), or use the docker backend",
        )
    )
    memory = choose_memory_limit(config, sandbox_is_host_user=False)
    checks.append(_memory_check("bwrap", memory))
    checks.append(Check("bwrap: enforces", "info", describe_bwrap(memory)))
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
    memory = choose_memory_limit(config, sandbox_is_host_user=not root)
    checks.append(_memory_check("process", memory))
    checks.append(
        Check(
            "process: isolation",
            "fail" if root and not namespaces else "warn",
            describe_isolation(root=root, namespaces=namespaces, memory=memory),
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
    checks += await anyio.to_thread.run_sync(_bwrap_checks, config)
    checks += await anyio.to_thread.run_sync(_process_checks, config)
    try:
        backend = await choose_backend(config)
    except SandboxError as exc:
        checks.append(Check("backend", "fail", f"backend = {config.backend}: {exc}"))
        return DoctorReport(tuple(checks), None, str(exc))
    checks.append(Check("backend", "info", f"{config.backend} → {backend.name}: {backend.reason}"))
    enforced = next((c.detail for c in checks if c.name == f"{backend.name}: enforces"), None)
    if backend.name == "process":
        enforced = next((c.detail for c in checks if c.name == "process: isolation"), None)
    checks.append(
        Check(
            "in force",
            "warn" if backend.warning else "ok",
            f"{backend.name}: {enforced or backend.reason}",
            "install bubblewrap (apt-get install bubblewrap) or Docker, and use backend = auto"
            if backend.warning
            else None,
        )
    )
    return DoctorReport(tuple(checks), backend)
