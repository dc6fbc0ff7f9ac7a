"""A join across two servers: high-risk renewals (docs sheet) against open tickets (tickets)."""

# pyright: basic
# (Task files are written the way a user writes one: plain dicts from JSON, no casts.)

from __future__ import annotations

import json
from typing import Any

from codemode.bench import (
    Final,
    Message,
    Reply,
    assistant_turns,
    call,
    json_results,
    search_then_run,
    turn,
)

KIND = "join across two servers (docs x tickets)"
PROMPT = (
    "Which customers in the renewals-2026 sheet with risk 'high' have open tickets, and how many? "
    'Answer with JSON {"<customer_id>": <open tickets>} for those with at least one.'
)
EXPECTED = {"CUST-0069": 2, "CUST-0221": 1, "CUST-0395": 1, "CUST-0414": 1}


def direct_agent(history: list[Message]) -> Reply:
    # A capable model: one filtered read of the sheet, then every open ticket (paged), joined in its head.
    step = assistant_turns(history)
    if step == 0:
        return turn(
            call("docs__query_sheet", sheet_id="renewals-2026", column="risk", equals="high", limit=500),
            call("tickets__list_tickets", status="open", limit=200),
        )
    last = json_results(history)[-1]
    if last.get("next_cursor"):
        return turn(call("tickets__list_tickets", status="open", limit=200, cursor=last["next_cursor"]))
    risky: set[str] = set()
    counts: dict[str, int] = {}
    for message in history:
        if message.get("name") == "docs__query_sheet":
            risky = {r["customer_id"] for r in json.loads(message["content"])["rows"]}
        if message.get("name") == "tickets__list_tickets":
            for ticket in json.loads(message["content"])["tickets"]:
                counts[ticket["customer_id"]] = counts.get(ticket["customer_id"], 0) + 1
    return Final({c: n for c, n in sorted(counts.items()) if c in risky})


PROGRAM = """\
from servers.docs import query_sheet
from servers.tickets import list_tickets
rows = query_sheet(sheet_id="renewals-2026", column="risk", equals="high", limit=500)["rows"]
risky = {r["customer_id"] for r in rows}
counts, cursor = {}, None
while True:
    page = list_tickets(status="open", limit=200, cursor=cursor)
    for t in page["tickets"]:
        counts[t["customer_id"]] = counts.get(t["customer_id"], 0) + 1
    cursor = page["next_cursor"]
    if not cursor:
        break
{c: n for c, n in sorted(counts.items()) if c in risky}
"""


def codemode_agent(history: list[Message]) -> Reply:
    return search_then_run(history, "query spreadsheet rows; list open tickets", PROGRAM, k=4)


def check(answer: Any) -> bool:
    return answer == EXPECTED
