"""Two ``codemode serve --transport http`` replicas on one PostgreSQL ledger, and a stateless
2026-07-28 client whose every retry (a request carrying ``requestState``) a load balancer sends to
the replica that does not run its run (issue 42).

The run asks twice (two writes to approve): each retry reaches replica B, whose answer goes
through the ledger to replica A's waiting run; B returns A's next question, then the run's result,
as A would have. With A killed (SIGKILL) after asking, B's answer to the retry names A and says
the run was lost, instead of hanging."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.ledger._pg import PostgresServer
from tests.serve.conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.anyio]

PASSWORD_VAR = "CODEMODE_TEST_REPLICAS_LEDGER_PASSWORD"

TWO_WRITES = """
from servers.crm import add_note
add_note(customer_id="CUST-0001", text="first, approved through replica B")
add_note(customer_id="CUST-0002", text="second, approved through replica B")
"""


class RetriesElsewhere(httpx2.AsyncBaseTransport):
    """A load balancer with no session to be sticky on: requests go to ``first``, retries of an
    input-required call (they carry ``requestState``) to ``other``."""

    def __init__(self, first: str, other: str) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._first, self._other = httpx2.URL(first), httpx2.URL(other)
        self.sent_elsewhere = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        target = self._first
        if b'"requestState"' in body:
            target, self.sent_elsewhere = self._other, self.sent_elsewhere + 1
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "host"]
        routed = httpx2.Request(request.method, target, headers=headers, content=body)
        return await self._inner.handle_async_request(routed)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def yes(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    assert "crm/add_note" in params.message
    return mcp_types.ElicitResult(action="accept", content={"approve": True})


def text_of(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


@pytest.fixture
def workspace(
    tmp_path: Path, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    monkeypatch.setenv(PASSWORD_VAR, postgres_server.password_in_url)
    name = postgres_server.new_database()
    config = make_workspace(tmp_path, TOKENS_TOML)
    url = json.dumps(postgres_server.url_with_reference(name, PASSWORD_VAR))
    config.write_text(config.read_text().replace("[ledger]\n", f"[ledger]\nurl = {url}\n", 1))
    yield config
    postgres_server.drop_database(name)


def client(router: RetriesElsewhere) -> Client:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {TOKENS['alice']}"},
        transport=router,
        timeout=httpx2.Timeout(30, read=300),
    )
    return Client(streamable_http_client("http://replicas/mcp", http_client=http), elicitation_callback=yes)


async def test_each_retry_reaching_the_other_replica_is_relayed_to_the_run_and_back(workspace: Path) -> None:
    with serving_http(workspace) as a_url, serving_http(workspace) as b_url:
        router = RetriesElsewhere(a_url, b_url)
        async with client(router) as session:
            assert session.protocol_version == "2026-07-28"
            result = await session.call_tool("run_code", {"code": TWO_WRITES})
    assert not result.is_error, text_of(result)
    summary: dict[str, Any] = result.structured_content or {}
    assert (summary["status"], summary["calls"], summary["denials"]) == ("ok", 2, 0), "both writes approved"
    assert "note_000002" in text_of(result), "the run's result, as replica A produced it"
    assert router.sent_elsewhere == 2, "both answers went through replica B"


async def test_a_killed_holder_is_named_and_the_retry_does_not_hang(workspace: Path) -> None:
    stderr_a = workspace.with_name("a.log")
    with serving_http(workspace, stderr_copy=stderr_a) as a_url, serving_http(workspace) as b_url:
        router = RetriesElsewhere(a_url, b_url)
        port_a = a_url.split(":")[2].split("/")[0]
        killed: list[int] = []

        async def kill_a_then_say_yes(
            context: Any, params: mcp_types.ElicitRequestParams
        ) -> mcp_types.ElicitResult:
            pid = _pid_listening_on(int(port_a))
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return mcp_types.ElicitResult(action="accept", content={"approve": True})

        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {TOKENS['alice']}"},
            transport=router,
            timeout=httpx2.Timeout(60),
        )
        transport = streamable_http_client("http://replicas/mcp", http_client=http)
        async with Client(transport, elicitation_callback=kill_a_then_say_yes) as session:
            result = await session.call_tool("run_code", {"code": TWO_WRITES})
    assert killed, "replica A asked before it was killed"
    assert result.is_error
    text = text_of(result)
    assert f":{port_a}' held it" in text and "was lost" in text, text
    assert "codemode ledger show RUN" in text and "without requestState" in text


def _pid_listening_on(port: int) -> int:
    """The serve process listening on ``port`` (from /proc: its socket's inode)."""
    wanted = f":{port:04X}"
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[1].endswith(wanted) and fields[3] == "0A":  # LISTEN
                    inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}").removeprefix("socket:[").rstrip("]") in inodes:
                    return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no process listens on port {port}")
