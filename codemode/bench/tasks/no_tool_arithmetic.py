"""A question whose answer is in the prompt: adding three amounts needs no tool, though the
CRM's payment tools are right there. Scored on whether each mode refrained (``NEEDS_CALLS``)."""

# pyright: basic
# (Task files are written the way a user writes one: plain dicts from JSON, no casts.)

from __future__ import annotations

from typing import Any

from codemode.bench import Final, Message, Reply

KIND = "needs no tool: arithmetic on amounts given in the prompt"
NEEDS_CALLS = 0
PROMPT = (
    "Customer CUST-0042 paid three invoices this month: 1,240.50 USD, 310.25 USD and 99.25 USD. "
    "How much did they pay in total? Answer with the number."
)
TOTAL = 1650.0


def direct_agent(history: list[Message]) -> Reply:
    return Final(TOTAL)


def codemode_agent(history: list[Message]) -> Reply:
    return Final(TOTAL)


def check(answer: Any) -> bool:
    return isinstance(answer, int | float) and not isinstance(answer, bool) and abs(answer - TOTAL) < 0.005
