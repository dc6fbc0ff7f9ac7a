"""Docker API calls a sandbox costs the host: inspects while a container boots, and each call's set-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from codemode.config import SandboxConfig
from codemode.sandbox import _docker
from codemode.sandbox._backend import Launch
from codemode.sandbox._docker import INSPECT_GAP_S, DockerSandbox
from codemode.sandbox._docker_api import ContainerState, DockerApi

pytestmark = pytest.mark.anyio


class _Api:
    def __init__(self) -> None:
        self.inspects = 0
        self.state_now = ContainerState(status="running", running=True, exit_code=0, oom_killed=False)

    def state(self, container_id: str) -> ContainerState | None:
        self.inspects += 1
        return self.state_now


def _sandbox(api: _Api, tmp_path: Path) -> DockerSandbox:
    launch = Launch("sb", tmp_path, tmp_path, None)
    return DockerSandbox(launch, "c1", cast(DockerApi, api), SandboxConfig())


async def test_the_engine_is_asked_at_growing_gaps_and_a_dead_container_is_still_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    clock = [100.0]
    monkeypatch.setattr(_docker, "_now", lambda: clock[0])
    api = _Api()
    sandbox = _sandbox(api, tmp_path)
    assert await sandbox.exit_reason() is None
    assert api.inspects == 0  # spawn has just inspected it for its cgroup
    asked: list[Any] = []
    # The channel asks every 0.1 s: 40 asks over 4 s of boot.
    for _ in range(40):
        asked.append(await sandbox.exit_reason())
        clock[0] += 0.1
    assert asked == [None] * 40
    first, longest = INSPECT_GAP_S
    assert 1 < api.inspects <= 4 / first  # fewer than the 40 asks, more than once
    assert api.inspects >= 4 / longest  # and never more than the longest gap apart
    api.state_now = ContainerState(status="exited", running=False, exit_code=3, oom_killed=False)
    clock[0] += longest
    reason = await sandbox.exit_reason()
    assert reason is not None and "exited with status 3 before connecting" in reason


class _Session:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.trust_env = True


class _Client:
    def __init__(self, base_url: str) -> None:
        self.api = _Session(base_url)


@pytest.mark.parametrize(
    ("base_url", "from_environment"),
    [("http+docker://localhost", False), ("https://docker.example:2376", True)],
)
def test_a_local_engine_s_api_calls_skip_the_environment_s_proxy_and_netrc_lookups(
    base_url: str, from_environment: bool, monkeypatch: pytest.MonkeyPatch
):
    # Every Docker API call of a run looked up proxies and ~/.netrc again; none applies to a socket.
    import docker

    client = _Client(base_url)

    def from_env(**_: object) -> _Client:
        return client

    monkeypatch.setattr(docker, "from_env", from_env)
    DockerApi()
    assert client.api.trust_env is from_environment
