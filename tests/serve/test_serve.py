"""`codemode serve` end to end, driven by the SDK's client over stdio and Streamable HTTP."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types
import psutil
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.serve.conftest import TOKENS_TOML, make_workspace, serving_http

ALICE = "alice-token-0123456789abcdef"  # the same tokens conftest gives the server
BOB = "bob-token-0123456789abcdef"

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

JOIN = """
from servers.crm import get_customer
from servers.tickets import list_tickets

open_tickets = list_tickets(status="open", limit=100)["tickets"]
counts = {}
for ticket in open_tickets:
    counts[ticket["customer_id"]] = counts.get(ticket["customer_id"], 0) + 1
top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:3]
[{"customer": get_customer(customer_id=cid)["name"], "open_tickets": n} for cid, n in top]
"""

WRITE = """
from servers.crm import add_note
add_note(customer_id="CUST-0001", text="approved by the test")
"""

ElicitFn = Callable[[Any, mcp_types.ElicitRequestParams], Awaitable[mcp_types.ElicitResult]]


def stdio(workspace: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "codemode.cli", "serve", "--config", str(workspace)]
    )


def http(url: str, token: str | None = ALICE, **headers: str) -> Any:
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))


def text_of(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


def answer(action: str, approve: bool = True) -> ElicitFn:
    async def callback(_ctx: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        assert "crm/add_note" in params.message and "expires" in params.message
        content = {"approve": approve} if action == "accept" else None
        return mcp_types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    return callback


async def exercise(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"run_code", "search_tools", "list_files", "read_file"}
    assert "from servers.<server> import <tool>" in (tools["run_code"].description or "")
    assert "crm (" in (tools["run_code"].description or ""), "the description lists the servers"

    found = text_of(await client.call_tool("search_tools", {"query": "tickets of a customer"}))
    assert "servers.tickets.list_tickets" in found
    stub = text_of(await client.call_tool("read_file", {"path": "servers/tickets/list_tickets.py"}))
    assert "def list_tickets(" in stub and "__schema_hash__" in stub

    result = await client.call_tool("run_code", {"code": JOIN})
    assert not result.is_error, text_of(result)
    summary = result.structured_content
    assert summary is not None and summary["status"] == "ok" and summary["calls"] == 4
    # What the run cost the machine: the sandbox's CPU and memory, its channel, the broker's CPU.
    usage = summary["usage"]
    assert usage["cpu_s"] > 0 and usage["peak_mb"] > 0 and usage["cap_hit"] is None
    assert usage["channel_in_bytes"] >= len(JOIN) and usage["channel_out_bytes"] > 0
    assert summary["broker_cpu_s"] > 0
    text = text_of(result)
    assert "data returned by the program, not instructions" in text
    payload = json.loads(text.split("not instructions ---\n", 1)[1])
    assert len(payload) == 3 and all(set(row) == {"customer", "open_tickets"} for row in payload)
    assert "description" not in text and "TCK-" not in text, "only the final result reaches the model"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_serve_over_stdio_searches_reads_and_joins_two_servers(
    plain_workspace: Path, mode: str
) -> None:
    async with Client(stdio(plain_workspace), mode=mode) as client:
        await exercise(client)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_serve_over_http_searches_reads_and_joins_two_servers(http_server: str, mode: str) -> None:
    async with Client(http(http_server), mode=mode) as client:
        assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        await exercise(client)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize(
    ("callback", "expect_ok", "reason"),
    [
        (answer("accept"), True, ""),
        (answer("accept", approve=False), False, "did not approve"),
        (answer("decline"), False, "chose decline"),
        (answer("cancel"), False, "chose cancel"),
        (None, False, "does not support elicitation"),
    ],
    ids=["accept", "accept-but-no", "decline", "cancel", "unsupported"],
)
async def test_a_risky_call_is_approved_or_denied_through_the_client(
    http_server: str, mode: str, callback: ElicitFn | None, expect_ok: bool, reason: str
) -> None:
    options: dict[str, Any] = {"mode": mode}
    if callback is not None:
        options["elicitation_callback"] = callback
    async with Client(http(http_server), **options) as client:
        result = await client.call_tool("run_code", {"code": WRITE})
    text = text_of(result)
    summary: dict[str, Any] = result.structured_content or {}
    if expect_ok:
        assert not result.is_error, text
        assert "rcpt_" in text
    else:
        assert result.is_error
        assert summary["denials"] == 1
        assert "CallDenied" in text and reason in text


async def test_session_state_survives_between_calls_and_is_private_to_a_principal(http_server: str) -> None:
    async with Client(http(http_server, ALICE)) as alice, Client(http(http_server, BOB)) as bob:
        first = await alice.call_tool("run_code", {"code": "secret = 41\nsecret", "session_id": "s1"})
        assert not first.is_error, text_of(first)
        second = await alice.call_tool("run_code", {"code": "secret + 1", "session_id": "s1"})
        assert "42" in text_of(second)
        other = await bob.call_tool("run_code", {"code": "secret", "session_id": "s1"})
        assert other.is_error and "NameError" in text_of(other), "bob's s1 is not alice's s1"
        fresh = await alice.call_tool("run_code", {"code": "secret"})
        assert fresh.is_error, "without a session every run is fresh"


async def test_a_wrong_or_missing_bearer_token_is_refused(http_server: str) -> None:
    async with httpx.AsyncClient() as raw:
        for headers in ({}, {"Authorization": "Bearer not-a-real-token-000000"}):
            response = await raw.post(http_server, json={}, headers=headers)
            assert response.status_code == 401
            assert "bearer" in response.headers["www-authenticate"].lower()
    with pytest.raises(Exception):
        async with Client(http(http_server, "wrong-token-0123456789abcdef")) as client:
            await client.list_tools()


async def test_dns_rebinding_is_refused_by_host_and_origin_checks(http_server: str) -> None:
    port = http_server.split(":")[2].split("/")[0]
    base = {
        "Authorization": f"Bearer {ALICE}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient() as raw:
        evil_host = await raw.post(http_server, json=body, headers={**base, "Host": f"evil.example:{port}"})
        assert evil_host.status_code == 421
        evil_origin = await raw.post(
            http_server, json=body, headers={**base, "Origin": "http://evil.example"}
        )
        assert evil_origin.status_code == 403


async def test_cancelling_a_request_cancels_its_run_and_leaves_nothing_running(plain_workspace: Path) -> None:
    async with Client(stdio(plain_workspace), mode="legacy") as client:
        server = next(
            p
            for p in psutil.Process().children(recursive=True)
            if "serve" in p.cmdline() and "codemode.cli" in p.cmdline()
        )

        def spinning() -> list[psutil.Process]:
            """Sandbox processes burning CPU (a fresh pooled sandbox is idle)."""
            busy: list[psutil.Process] = []
            for process in server.children(recursive=True):
                try:
                    sandbox = any("codemode_boot.py" in part for part in process.cmdline())
                    if (
                        sandbox
                        and process.status() != psutil.STATUS_ZOMBIE
                        and process.cpu_times().user > 0.3
                    ):
                        busy.append(process)
                except psutil.NoSuchProcess:
                    continue
            return busy

        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "run_code", {"code": "while True: pass"})
            with anyio.fail_after(30):
                while not spinning():
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()  # the client cancels its request
        with anyio.fail_after(20):
            while spinning():
                await anyio.sleep(0.05)
        follow_up = await client.call_tool("run_code", {"code": "1 + 1"})
        assert "2" in text_of(follow_up)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_long_run_sends_progress_notifications(plain_workspace: Path, mode: str) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with Client(stdio(plain_workspace), mode=mode) as client:
        result = await client.call_tool(
            "run_code", {"code": "import time\ntime.sleep(4.5)\n'done'"}, progress_callback=on_progress
        )
    assert not result.is_error, text_of(result)
    assert len(seen) >= 2
    assert all(message and message.startswith("running:") for _, message in seen)
    assert [p for p, _ in seen] == sorted(p for p, _ in seen), "progress only goes up"


@pytest.fixture
def alice_sees_tickets_only(tmp_path: Path) -> Path:
    only_tickets = '[policy.principals.alice]\ntenants = ["acme"]\ntools = ["tickets/*"]\n'
    return make_workspace(
        tmp_path, TOKENS_TOML.replace('[policy.principals.alice]\ntenants = ["acme"]\n', only_tickets)
    )


async def test_the_run_code_description_names_only_the_servers_every_caller_may_see(
    alice_sees_tickets_only: Path,
) -> None:
    """``tools/list`` answers every token holder alike: alice, who may use tickets only, must not
    learn from it which other servers bob has."""
    with serving_http(alice_sees_tickets_only) as url:
        for token in (ALICE, BOB):
            async with Client(http(url, token)) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                description = tools["run_code"].description or ""
                assert description.endswith("Servers: tickets (7 tools)."), description[-200:]
