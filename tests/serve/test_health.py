"""``GET /healthz`` and ``GET /readyz`` of ``codemode serve --transport http``: answered without a
token and whatever the Host, telling nothing; ready only once the warm pool first filled, until
the replica drains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from codemode.serve._health import HealthEndpoints, Readiness

from .conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http

pytestmark = pytest.mark.anyio


class Probe:
    """Calls the middleware as uvicorn would and keeps what it sent."""

    def __init__(self, readiness: Readiness) -> None:
        self.passed: list[str] = []
        self.endpoints = HealthEndpoints(self._app, readiness)

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.passed.append(str(scope.get("path")))

    async def get(self, path: str, method: str = "GET") -> tuple[int, bytes]:
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        scope: dict[str, Any] = {"type": "http", "path": path, "method": method, "headers": []}
        await self.endpoints(scope, receive, send)
        if not sent:
            return 0, b""
        return int(sent[0]["status"]), bytes(sent[1]["body"])


async def test_ready_once_the_pool_first_fills_and_not_again_once_draining() -> None:
    full = anyio.Event()
    readiness = Readiness()
    probe = Probe(readiness)
    async with anyio.create_task_group() as tg:
        tg.start_soon(readiness.watch_warm, full.is_set, 0.001)
        status, body = await probe.get("/readyz")
        assert (status, json.loads(body)) == (503, {"status": "not ready", "waiting_for": "warm pool"})
        assert (await probe.get("/healthz"))[0] == 200, "alive while it warms"
        full.set()
    assert await probe.get("/readyz") == (200, b'{"status": "ready"}')
    readiness.draining = True
    status, body = await probe.get("/readyz")
    assert (status, json.loads(body)["waiting_for"]) == (503, "draining")
    assert probe.passed == [], "the probe paths never reach the MCP app"


async def test_other_paths_pass_and_other_methods_are_refused() -> None:
    probe = Probe(Readiness())
    assert await probe.get("/mcp") == (0, b"")
    assert await probe.get("/healthz/extra") == (0, b"")
    assert probe.passed == ["/mcp", "/healthz/extra"]
    assert (await probe.get("/readyz", method="POST"))[0] == 405
    assert await probe.get("/healthz", method="HEAD") == (200, b""), "HEAD: no body"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path, TOKENS_TOML)  # (outside the test's event loop: it runs the CLI)


@pytest.mark.integration
async def test_probes_need_no_token_nor_a_known_host_and_tell_nothing(workspace: Path) -> None:
    with serving_http(workspace) as url:
        base = url.rsplit("/", 1)[0]
        port = base.rsplit(":", 1)[1]
        async with httpx.AsyncClient() as web:
            with anyio.fail_after(60):
                while (ready := await web.get(base + "/readyz")).status_code != 200:
                    assert ready.status_code == 503, ready.text
                    await anyio.sleep(0.1)
            # Kubernetes sends the pod's address as Host, which allowed_hosts does not name.
            probed = await web.get(base + "/healthz", headers={"Host": f"probe.internal:{port}"})
            mcp_without_token = await web.post(url, json={})
            signed = {"Authorization": f"Bearer {TOKENS['alice']}"}
            rebound = await web.post(url, json={}, headers={**signed, "Host": f"probe.internal:{port}"})
    assert ready.json() == {"status": "ready"}
    assert (probed.status_code, probed.json()) == (200, {"status": "ok"})
    assert probed.headers["cache-control"] == "no-store"
    assert mcp_without_token.status_code == 401, "the MCP endpoint still needs a token"
    assert rebound.status_code == 421, "and still checks its Host"
