"""A fan-out over 100 records: one read per customer, summed."""

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
    search_then_run,
    turn,
)

KIND = "fan-out over 100 records (crm)"
PROMPT = (
    "What is the total lifetime value of customers CUST-0101 to CUST-0200 (inclusive)? "
    "Answer with the number, rounded to cents."
)
EXPECTED = 5631406.1
IDS = [f"CUST-{i:04d}" for i in range(101, 201)]
BATCH = 20  # parallel tool calls a model issues per turn


def direct_agent(history: list[Message]) -> Reply:
    step = assistant_turns(history)
    if step * BATCH < len(IDS):
        batch = IDS[step * BATCH : (step + 1) * BATCH]
        return turn(*(call("crm__get_customer", customer_id=c) for c in batch))
    total = sum(
        float(json.loads(m["content"])["lifetime_value"])
        for m in history
        if m.get("name") == "crm__get_customer" and not m.get("is_error")
    )
    return Final(round(total, 2))


PROGRAM = """\
import codemode
from servers.crm import get_customer
ids = [f"CUST-{i:04d}" for i in range(101, 201)]
rows = codemode.parallel(get_customer, [{"customer_id": c} for c in ids])
round(sum(r["lifetime_value"] for r in rows), 2)
"""


def codemode_agent(history: list[Message]) -> Reply:
    return search_then_run(history, "get a customer record", PROGRAM, k=3)


def check(answer: Any) -> bool:
    return isinstance(answer, int | float) and abs(float(answer) - EXPECTED) < 0.02
