"""The ``tickets`` example server: filters, structured and unstructured tools, counted writes."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

pytestmark = pytest.mark.anyio

WITH_SCHEMA = {"list_tickets", "get_ticket", "add_comment", "close_ticket", "assign_ticket"}
WITHOUT_SCHEMA = {"search_tickets", "ticket_stats"}


def count_writes(state_dir: Path) -> int:
    conn = sqlite3.connect(state_dir / "writes.sqlite3", timeout=30)
    try:
        return conn.execute("SELECT count(*) FROM writes").fetchone()[0]
    finally:
        conn.close()


async def all_tickets(tickets: Client, **filters: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = (
            await tickets.call_tool("list_tickets", {**filters, "cursor": cursor, "limit": 70})
        ).structured_content
        assert page is not None
        found += page["tickets"]
        cursor = page["next_cursor"]
        if cursor is None:
            assert len(found) == page["total"]
            return found


async def test_tickets_output_schema_only_on_list_get_and_write_tools(tickets: Client) -> None:
    tools = {t.name: t for t in (await tickets.list_tools()).tools}
    assert set(tools) == WITH_SCHEMA | WITHOUT_SCHEMA
    assert {n for n, t in tools.items() if t.output_schema is not None} == WITH_SCHEMA
    assert tools["get_ticket"].output_schema["properties"]["comments"]["type"] == "array"  # type: ignore[index]
    assert tools["search_tickets"].annotations.read_only_hint is True  # type: ignore[union-attr]
    assert tools["close_ticket"].annotations.read_only_hint is False  # type: ignore[union-attr]


async def test_tickets_search_and_stats_answer_json_text_without_structured_content(tickets: Client) -> None:
    search = await tickets.call_tool("search_tickets", {"query": "SAML login", "limit": 5})
    assert not search.is_error
    assert search.structured_content is None
    found = json.loads(search.content[0].text)  # type: ignore[union-attr]
    assert found["total_matches"] > 0
    assert len(found["results"]) <= 5
    assert all(re.fullmatch(r"TCK-\d{4}", r["ticket_id"]) for r in found["results"])

    stats_result = await tickets.call_tool("ticket_stats", {})
    assert stats_result.structured_content is None
    stats = json.loads(stats_result.content[0].text)  # type: ignore[union-attr]
    assert stats["total"] == 300
    assert sum(stats["by_status"].values()) == 300


async def test_tickets_filters_and_pagination_cover_all_300_tickets(tickets: Client) -> None:
    everything = await all_tickets(tickets)
    assert [t["ticket_id"] for t in everything] == [f"TCK-{n}" for n in range(1001, 1301)]
    for status in ("open", "in_progress", "closed"):
        subset = await all_tickets(tickets, status=status)
        assert subset == [t for t in everything if t["status"] == status]
    sso = await all_tickets(tickets, label="sso")
    assert sso
    assert all("sso" in t["labels"] for t in sso)
    priya = await all_tickets(tickets, assignee="priya.shah")
    assert priya
    assert all(t["assignee"] == "priya.shah" for t in priya)


async def test_tickets_belong_to_crm_customers(tickets: Client, crm: Client) -> None:
    everything = await all_tickets(tickets)
    assert all(1 <= int(t["customer_id"].removeprefix("CUST-")) <= 500 for t in everything)
    busiest = max(everything, key=lambda t: sum(u["customer_id"] == t["customer_id"] for u in everything))
    theirs = await all_tickets(tickets, customer_id=busiest["customer_id"])
    assert len(theirs) >= 3
    customer = await crm.call_tool("get_customer", {"customer_id": busiest["customer_id"]})
    assert not customer.is_error
    ticket = (await tickets.call_tool("get_ticket", {"ticket_id": busiest["ticket_id"]})).structured_content
    assert ticket is not None
    assert customer.structured_content["company"] in ticket["body"]  # type: ignore[index]


async def test_tickets_writes_return_receipts_are_counted_and_visible(
    tickets: Client, shared_state_dir: Path
) -> None:
    state = shared_state_dir / "tickets"
    target = next(t for t in await all_tickets(tickets, status="open") if t["assignee"] is None)
    tid = target["ticket_id"]
    before = count_writes(state)

    comment = await tickets.call_tool("add_comment", {"ticket_id": tid, "body": "Looking into it."})
    assign = await tickets.call_tool("assign_ticket", {"ticket_id": tid, "assignee": "marcus.lee"})
    close = await tickets.call_tool("close_ticket", {"ticket_id": tid, "resolution": "Fixed in 2026.7."})
    receipts = [r.structured_content["receipt_id"] for r in (comment, assign, close)]  # type: ignore[index]
    assert all(re.fullmatch(r"trcpt_\d{6}", r) for r in receipts)
    assert len(set(receipts)) == 3
    assert assign.structured_content["previous_assignee"] is None  # type: ignore[index]
    assert close.structured_content["previous_status"] == "in_progress"  # type: ignore[index]
    assert count_writes(state) == before + 3

    ticket = (await tickets.call_tool("get_ticket", {"ticket_id": tid})).structured_content
    assert ticket is not None
    assert ticket["status"] == "closed"
    assert ticket["assignee"] == "marcus.lee"
    assert ticket["resolution"] == "Fixed in 2026.7."
    assert ticket["comments"][-1]["body"] == "Looking into it."
    assert ticket["comments"][-1]["receipt_id"] == receipts[0]

    again = await tickets.call_tool("close_ticket", {"ticket_id": tid, "resolution": "twice"})
    assert again.is_error
    nobody = await tickets.call_tool("assign_ticket", {"ticket_id": tid, "assignee": "mallory"})
    assert nobody.is_error
    assert count_writes(state) == before + 3
