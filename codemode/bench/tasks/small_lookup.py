"""The counter-example: a small catalog and a small result. One call answers it, so direct
calling needs fewer requests than code mode's search + run_code, and may well cost less."""

# pyright: basic
# (Task files are written the way a user writes one: plain dicts from JSON, no casts.)

from __future__ import annotations

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

KIND = "small catalog, small result (where direct calling may win)"
NEEDS_CALLS = 1  # one read answers it
PROMPT = "How many open tickets does customer CUST-0042 have? Answer with the number."


def direct_agent(history: list[Message]) -> Reply:
    if assistant_turns(history) == 0:
        return turn(call("tickets__list_tickets", customer_id="CUST-0042", status="open"))
    return Final(json_results(history)[0]["total"])


def codemode_agent(history: list[Message]) -> Reply:
    return search_then_run(
        history,
        "list tickets of a customer",
        "from servers.tickets import list_tickets\n"
        'list_tickets(customer_id="CUST-0042", status="open")["total"]\n',
        k=2,
    )


def check(answer: Any) -> bool:
    return answer == 1
