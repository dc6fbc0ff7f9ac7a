"""The Docker backend's own seccomp profile: Docker's default allow list without io_uring and the
other calls the bwrap filter denies, checked as data and inside real sandbox containers."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codemode.cli._sandbox_cmd import sandbox
from codemode.config import SandboxConfig
from codemode.errors import SandboxUnavailableError
from codemode.sandbox import Program, SandboxManager
from codemode.sandbox._docker_seccomp import DOCKER_DEFAULT_ALLOWED, docker_profile, docker_profile_json
from codemode.sandbox._seccomp import CLONE_NAMESPACE_FLAGS, DENIED, SYSCALLS, current_arch
from tests.sandbox.test_bwrap import SYSCALL

pytestmark = pytest.mark.anyio

IO_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")


def rules(profile: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [rule for rule in profile["syscalls"] if rule["action"] == action]


@pytest.mark.parametrize("machine", sorted(SYSCALLS))
def test_the_profile_allows_nothing_the_bwrap_filter_denies(machine: str) -> None:
    profile = docker_profile(machine)
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO" and profile["defaultErrnoRet"] == 1
    allowed = {name for rule in rules(profile, "SCMP_ACT_ALLOW") for name in rule["names"]}
    assert set(IO_URING) <= DOCKER_DEFAULT_ALLOWED, "the calls Docker's default lets through"
    assert allowed.isdisjoint(DENIED), sorted(allowed & set(DENIED))
    denied = {name for rule in rules(profile, "SCMP_ACT_ERRNO") for name in rule["names"]}
    assert set(DENIED) | {"clone3"} == denied
    # Docker's own conditions stay: clone without namespace flags, no AF_VSOCK sockets.
    conditional = {
        rule["names"][0]: rule["args"] for rule in rules(profile, "SCMP_ACT_ALLOW") if "args" in rule
    }
    assert conditional["clone"] == [
        {"index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}
    ]
    assert conditional["socket"] == [{"index": 0, "value": 40, "op": "SCMP_CMP_NE"}]


def test_the_profile_names_only_the_machines_own_abi() -> None:
    assert docker_profile("x86_64")["architectures"] == ["SCMP_ARCH_X86_64"]
    assert docker_profile("arm64")["architectures"] == ["SCMP_ARCH_AARCH64"]
    assert "arch_prctl" in docker_profile("x86_64")["syscalls"][0]["names"]
    assert "arch_prctl" not in docker_profile("aarch64")["syscalls"][0]["names"]


def test_an_unknown_architecture_gets_no_profile() -> None:
    with pytest.raises(SandboxUnavailableError, match="s390x"):
        docker_profile_json("s390x")


def test_the_json_sent_to_the_engine_is_the_profile() -> None:
    assert json.loads(docker_profile_json()) == docker_profile()


# -- inside real containers ------------------------------------------------------------------------


@pytest.fixture
def run_in_docker(
    docker_image: str, stub_tree: Any, handler: Any, new_binding: Callable[..., Any]
) -> Callable[..., Any]:
    """``await run_in_docker(code)``: one run in a fresh docker sandbox."""

    async def run(code: str) -> Any:
        config = SandboxConfig(backend="docker", image=docker_image, pool_size=0, wall_time_s=20.0)
        async with SandboxManager(config) as manager:
            return await manager.run(Program(code), binding=new_binding(), modules=stub_tree, handler=handler)

    return run


@pytest.mark.docker
async def test_io_uring_and_escape_calls_are_refused_and_programs_still_work(
    run_in_docker: Callable[..., Any],
) -> None:
    table = current_arch().table
    names = (
        *IO_URING,
        "ptrace",
        "process_vm_readv",
        "name_to_handle_at",
        "personality",
        "unshare",
        "setns",
        "mount",
        "bpf",
        "keyctl",
        "userfaultfd",
        "perf_event_open",
        "clone3",
    )
    calls = {name: table[name] for name in names}
    code = (
        SYSCALL
        + "params = ctypes.create_string_buffer(120)\n"  # struct io_uring_params, all zero
        + f"calls = {calls!r}\n"
        + "seen = {name: call(nr, 1, ctypes.addressof(params), 0, 0, 0) for name, nr in calls.items()}\n"
        + f"seen['clone(CLONE_NEWUSER)'] = call({table['clone']}, 0x10000000 | 17, 0, 0, 0, 0)\n"
        + "box = []\n"
        + "thread = threading.Thread(target=lambda: box.append('thread'))\n"
        + "thread.start(); thread.join()\n"
        + "child = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True)\n"
        + "seen['works'] = [box, child.stdout.strip()]\n"
        + "seen\n"
    )
    outcome = await run_in_docker(code)
    assert outcome.status == "ok", outcome.error
    seen = outcome.result
    assert seen.pop("works") == [["thread"], "42"]
    assert seen.pop("clone3") == "ENOSYS"  # libc falls back to clone, whose flags the profile reads
    assert seen == dict.fromkeys([*calls.keys() - {"clone3"}, "clone(CLONE_NEWUSER)"], "EPERM")


@pytest.mark.docker
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the x32 ABI exists on x86-64 only")
async def test_a_call_of_another_abi_ends_the_sandbox(run_in_docker: Callable[..., Any]) -> None:
    # x32's getpid: the kernel would answer ENOSYS or the pid; the profile refuses the ABI outright.
    outcome = await run_in_docker(SYSCALL + "call(0x40000000 | 39)\n'survived'\n")
    assert outcome.status == "error" and outcome.result is None, outcome


@pytest.mark.docker
def test_doctor_says_the_profile_is_in_force(docker_image: str, tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text(f'[sandbox]\nbackend = "docker"\nimage = "{docker_image}"\n')
    result = CliRunner().invoke(sandbox, ["doctor", "--json", "--config", str(config)])
    assert result.exit_code == 0, result.output
    checks = {check["name"]: check for check in json.loads(result.output)["checks"]}
    seccomp = checks["seccomp"]
    assert seccomp["status"] == "ok" and "in force" in seccomp["detail"], seccomp
    assert "io_uring" in seccomp["detail"] and f"minus {len(DENIED)} system calls" in seccomp["detail"]
    assert "io_uring" in checks["docker: enforces"]["detail"]
