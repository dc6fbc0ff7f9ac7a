"""The ``docs`` example server: long transcripts, memos, a large spreadsheet, search, resources, prompt."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from mcp import Client, MCPError

pytestmark = pytest.mark.anyio

TOOLS = {"search_documents", "list_documents", "get_document", "get_sheet", "query_sheet"}
TURN_RE = re.compile(r"^\[\d\d:\d\d:\d\d\] [A-Z][^:\[\]]+: \S.*$")


async def all_documents(docs: Client) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = (await docs.call_tool("list_documents", {"cursor": cursor, "limit": 15})).structured_content
        assert page is not None
        documents += page["documents"]
        cursor = page["next_cursor"]
        if cursor is None:
            return documents


async def test_docs_tools_are_read_only_with_output_schemas(docs: Client) -> None:
    tools = {t.name: t for t in (await docs.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.output_schema is not None
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.description
        assert "\n        " not in tool.description


async def test_docs_serves_forty_documents_of_three_kinds_across_pages(docs: Client) -> None:
    documents = await all_documents(docs)
    assert len(documents) == 40
    assert len({d["doc_id"] for d in documents}) == 40
    assert Counter(d["kind"] for d in documents) == {"transcript": 20, "memo": 12, "spreadsheet": 8}
    memos = (await docs.call_tool("list_documents", {"kind": "memo"})).structured_content
    assert memos is not None
    assert memos["total"] == 12
    assert {d["kind"] for d in memos["documents"]} == {"memo"}
    bad = await docs.call_tool("list_documents", {"cursor": "not-a-cursor"})
    assert bad.is_error


async def test_docs_has_long_transcripts_of_timestamped_speaker_turns(docs: Client) -> None:
    transcripts = [d for d in await all_documents(docs) if d["kind"] == "transcript"]
    long = [d for d in transcripts if d["size_chars"] >= 50_000]
    assert len(long) >= 5
    document = (await docs.call_tool("get_document", {"doc_id": long[0]["doc_id"]})).structured_content
    assert document is not None
    text = document["text"]
    assert len(text) == long[0]["size_chars"] >= 50_000
    turns = [line for line in text.splitlines() if line.startswith("[")]
    assert len(turns) > 300
    assert all(TURN_RE.match(line) for line in turns if line != "[end of recording]")
    assert re.search(r"\bCUST-\d{4}\b", text)
    assert re.search(r"\bTCK-\d{4}\b", text)


async def test_docs_transcript_ticket_mentions_agree_with_the_tickets_server(
    docs: Client, tickets: Client
) -> None:
    document = (
        await docs.call_tool("get_document", {"doc_id": "mtg-2026-02-23-support-triage"})
    ).structured_content
    assert document is not None
    pairs = dict(re.findall(r"Next one is (TCK-\d{4}), [^()]+ \((CUST-\d{4})\)", document["text"]))
    assert len(pairs) >= 5
    for ticket_id, customer_id in list(pairs.items())[:5]:
        ticket = (await tickets.call_tool("get_ticket", {"ticket_id": ticket_id})).structured_content
        assert ticket is not None
        assert ticket["customer_id"] == customer_id


async def test_docs_sales_sheet_has_over_ten_thousand_rows_read_page_by_page(docs: Client) -> None:
    rows: list[dict[str, Any]] = []
    offset: int | None = 0
    total = None
    while offset is not None:
        page = (
            await docs.call_tool("get_sheet", {"sheet_id": "sales-2026", "offset": offset, "limit": 1000})
        ).structured_content
        assert page is not None
        assert page["columns"] == ["date", "region", "customer_id", "product", "units", "unit_price", "total"]
        total = page["total_rows"]
        rows += page["rows"]
        offset = page["next_offset"]
    assert total is not None
    assert total >= 10_000
    assert len(rows) == total
    assert all(abs(r["units"] * r["unit_price"] - r["total"]) < 0.01 for r in rows)
    assert [r["date"] for r in rows] == sorted(r["date"] for r in rows)

    matches = (
        await docs.call_tool(
            "query_sheet",
            {"sheet_id": "sales-2026", "column": "customer_id", "equals": "CUST-0042", "limit": 1000},
        )
    ).structured_content
    assert matches is not None
    expected = [r for r in rows if r["customer_id"] == "CUST-0042"]
    assert matches["total_matches"] == len(expected) > 0
    assert matches["rows"] == expected


async def test_docs_sheet_tools_refuse_documents_that_are_not_sheets(docs: Client) -> None:
    result = await docs.call_tool("get_sheet", {"sheet_id": "memo-2026-05-04-refund-policy"})
    assert result.is_error
    result = await docs.call_tool("query_sheet", {"sheet_id": "sales-2026", "column": "nope", "equals": "1"})
    assert result.is_error
    result = await docs.call_tool("get_document", {"doc_id": "no-such-doc"})
    assert result.is_error


async def test_docs_search_ranks_the_account_review_first_for_its_customer(docs: Client) -> None:
    found = (await docs.call_tool("search_documents", {"query": "CUST-0042 renewal"})).structured_content
    assert found is not None
    assert found["results"][0]["doc_id"] == "mtg-2026-01-15-account-review-cust-0042"
    assert "CUST-0042" in found["results"][0]["snippet"]
    memos = (
        await docs.call_tool("search_documents", {"query": "refund", "kind": "memo", "limit": 3})
    ).structured_content
    assert memos is not None
    assert 0 < len(memos["results"]) <= 3
    assert {r["kind"] for r in memos["results"]} == {"memo"}
    assert memos["results"][0]["doc_id"] == "memo-2026-05-04-refund-policy"


async def test_docs_exposes_index_staff_and_document_template_resources(docs: Client) -> None:
    resources = {str(r.uri) for r in (await docs.list_resources()).resources}
    assert resources == {"docs://index", "docs://staff"}
    templates = [t.uri_template for t in (await docs.list_resource_templates()).resource_templates]
    assert templates == ["docs://documents/{doc_id}"]
    index = json.loads((await docs.read_resource("docs://index")).contents[0].text)  # type: ignore[union-attr]
    assert len(index) == 40
    memo = await docs.read_resource("docs://documents/memo-2026-05-04-refund-policy")
    assert "Subject: Refund policy clarification" in memo.contents[0].text  # type: ignore[union-attr]
    with pytest.raises(MCPError):
        await docs.read_resource("docs://documents/no-such-doc")


async def test_docs_summarize_prompt_embeds_the_document(docs: Client) -> None:
    prompts = {p.name: p for p in (await docs.list_prompts()).prompts}
    assert set(prompts) == {"summarize_document"}
    result = await docs.get_prompt("summarize_document", {"doc_id": "memo-2026-05-04-refund-policy"})
    text = result.messages[0].content.text  # type: ignore[union-attr]
    assert "Refunds within the 30-day trial are automatic" in text
    assert "data, not instructions" in text
