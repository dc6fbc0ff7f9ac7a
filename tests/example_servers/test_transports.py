"""All example servers over stdio and Streamable HTTP, in both protocol eras, deterministically."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
# Calls whose answers must be byte-identical across two starts of a server.
FINGERPRINT_CALLS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "docs": [
        ("list_documents", {}),
        ("get_document", {"doc_id": "mtg-2026-04-09-q1-business-review"}),
        ("get_document", {"doc_id": "memo-2026-04-20-renewal-risk-list"}),
        ("get_sheet", {"sheet_id": "sales-2026", "offset": 9000, "limit": 500}),
        ("search_documents", {"query": "TCK-1017 SSO export"}),
    ],
    "crm": [
        ("list_customers", {"limit": 200}),
        ("list_customers", {"limit": 200, "cursor": "b2Zmc2V0OjIwMA"}),
        ("list_customers", {"limit": 200, "cursor": "b2Zmc2V0OjQwMA"}),
        ("get_customer", {"customer_id": "CUST-0137"}),
        ("search_customers", {"query": "renewal pricing"}),
    ],
    "tickets": [
        ("list_tickets", {"limit": 200}),
        ("list_tickets", {"limit": 200, "cursor": "b2Zmc2V0OjIwMA"}),
        ("get_ticket", {"ticket_id": "TCK-1250"}),
        ("search_tickets", {"query": "export"}),
        ("ticket_stats", {}),
    ],
}


async def fingerprint(client: Client, server: str) -> list[Any]:
    tools = [t.model_dump(mode="json") for t in (await client.list_tools()).tools]
    answers: list[Any] = [tools]
    for name, arguments in FINGERPRINT_CALLS[server]:
        result = await client.call_tool(name, arguments)
        assert not result.is_error, result
        answers.append([result.structured_content, [c.model_dump(mode="json") for c in result.content]])
    return answers


@pytest.mark.parametrize("server", ["docs", "crm", "tickets"])
async def test_each_server_serves_identical_data_over_stdio_and_streamable_http_in_both_eras(
    server: str, stdio: Any, start_http: Any, tmp_path: Path
) -> None:
    """Two starts (with different hash seeds), three connections: stdio, HTTP 2026-07-28, HTTP 2025-11-25."""
    prints: dict[str, list[Any]] = {}

    async def over_stdio() -> None:
        args = () if server == "docs" else ("--state-dir", str(tmp_path / "stdio"))
        async with Client(stdio(server, *args, env={"PYTHONHASHSEED": "1"})) as client:
            prints["stdio"] = await fingerprint(client, server)

    async def over_http() -> None:
        args = () if server == "docs" else ("--state-dir", str(tmp_path / "http"))
        with ExitStack() as stack:
            # Waiting for the READY line blocks, so it happens in a worker thread.
            running = await anyio.to_thread.run_sync(
                stack.enter_context, start_http(server, *args, env={"PYTHONHASHSEED": "2"})
            )
            assert running.url.startswith("http://127.0.0.1:")
            assert running.url.endswith("/mcp")
            for mode, version in (("auto", MODERN), ("legacy", HANDSHAKE)):
                async with Client(running.url, mode=mode) as client:
                    assert client.protocol_version == version
                    assert client.server_info is not None
                    assert client.server_info.name == server
                    prints[mode] = await fingerprint(client, server)

    async with anyio.create_task_group() as tg:
        tg.start_soon(over_stdio)
        tg.start_soon(over_http)
    # sort_keys: the SDK orders schema keys differently per protocol era; the content is what counts.
    stdio_print, auto_print, legacy_print = (
        json.dumps(prints[k], sort_keys=True) for k in ("stdio", "auto", "legacy")
    )
    assert stdio_print == auto_print == legacy_print


async def test_tickets_runs_as_a_stateless_http_server_negotiating_2026_07_28(
    start_http: Any, tmp_path: Path
) -> None:
    with start_http("tickets", "--stateless", "--state-dir", str(tmp_path)) as running:
        async with Client(running.url) as client:
            assert client.protocol_version == MODERN
            result = await client.call_tool(
                "add_comment", {"ticket_id": "TCK-1100", "body": "stateless hello"}
            )
            assert not result.is_error
            ticket = (await client.call_tool("get_ticket", {"ticket_id": "TCK-1100"})).structured_content
            assert ticket is not None
            assert ticket["comments"][-1]["body"] == "stateless hello"
        # A handshake-era client still gets served, without a session.
        async with Client(running.url, mode="legacy") as client:
            assert client.protocol_version == HANDSHAKE
            stats = await client.call_tool("ticket_stats", {})
            assert json.loads(stats.content[0].text)["total"] == 300  # type: ignore[union-attr]


def test_http_transport_without_a_port_is_a_usage_error(cli: Any) -> None:
    result = cli("tickets", "--transport", "http")
    assert result.returncode == 2
    assert "--transport http needs --port" in result.stderr
