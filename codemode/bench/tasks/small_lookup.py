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
    run_code,
    run_code_value,
    tool_results,
    turn,
)

KIND = "small catalog, small result (where direct calling may win)"
PROMPT = "How many open tickets does customer CUST-0042 have? Answer with the number."


def direct_agent(history: list[Message]) -> Reply:
    if assistant_turns(history) == 0:
        return turn(call("tickets__list_tickets", customer_id="CUST-0042", status="open"))
    return Final(json_results(history)[0]["total"])


def codemode_agent(history: list[Message]) -> Reply:
    step = assistant_turns(history)
    if step == 0:
        return turn(call("search_tools", query="list tickets of a customer", detail="full", k=2))
    if step == 1:
        return run_code(
            "from servers.tickets import list_tickets\n"
            'list_tickets(customer_id="CUST-0042", status="open")["total"]\n'
        )
    return Final(run_code_value(tool_results(history)[0]))


def check(answer: Any) -> bool:
    return answer == 1
