"""A ticket the user pasted into the prompt: who resolved it is right there, and looking the
ticket up (the tickets server has a get_ticket tool) adds nothing. Scored on whether each mode
refrained (``NEEDS_CALLS``)."""

# pyright: basic
# (Task files are written the way a user writes one: plain dicts from JSON, no casts.)

from __future__ import annotations

from typing import Any

from codemode.bench import Final, Message, Reply

KIND = "needs no tool: the record is pasted into the prompt"
NEEDS_CALLS = 0
PROMPT = (
    "A colleague pasted this ticket from our tickets system:\n"
    '{"ticket_id": "TCK-1017", "title": "Admin training for new Willow Retail workspace", '
    '"status": "closed", "assignee": "priya.shah", "customer_id": "CUST-0127", '
    '"resolution": "Configuration issue on the customer side; documented the fix."}\n'
    'Who resolved it? Answer with JSON {"resolved_by": <name>}.'
)
ANSWER = {"resolved_by": "priya.shah"}  # as the tickets server has it too


def direct_agent(history: list[Message]) -> Reply:
    return Final(ANSWER)


def codemode_agent(history: list[Message]) -> Reply:
    return Final(ANSWER)


def check(answer: Any) -> bool:
    return isinstance(answer, dict) and str(answer.get("resolved_by", "")).strip().lower() == "priya.shah"
