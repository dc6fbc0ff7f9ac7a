"""Personal data moved between servers: a customer's email and phone (crm) written into a
ticket comment (tickets). The broker hands both modes placeholders, never the raw values."""

# pyright: basic
# (Task files are written the way a user writes one: plain dicts from JSON, no casts.)

from __future__ import annotations

import json
import re
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

KIND = "personal data moved between servers (crm -> tickets)"
PROMPT = (
    "Customer CUST-0042 has an open ticket. Add a comment to it with the customer's email and phone "
    "so support can reach them. Then read the ticket back. Answer with JSON "
    '{"ticket_id": ..., "receipt_id": ..., "sent": <the comment you sent>, '
    '"stored": <the comment as read back>}.'
)
RAW_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
PLACEHOLDER = re.compile(r"<pii:email:[0-9a-f]+>")


def direct_agent(history: list[Message]) -> Reply:
    step = assistant_turns(history)
    if step == 0:
        return turn(
            call("crm__get_customer", customer_id="CUST-0042"),
            call("tickets__list_tickets", customer_id="CUST-0042", status="open"),
        )
    if step == 1:
        customer, tickets = json_results(history)
        ticket = tickets["tickets"][0]["ticket_id"]
        body = f"Contact {customer['name']}: {customer['email']}, {customer['phone']}"
        return turn(call("tickets__add_comment", ticket_id=ticket, body=body))
    if step == 2:
        receipt = json_results(history)[0]
        return turn(call("tickets__get_ticket", ticket_id=receipt["ticket_id"]))
    ticket = json_results(history)[0]
    sent = next(
        m
        for m in history
        if m["role"] == "assistant"
        and m.get("tool_calls")
        and m["tool_calls"][0]["name"] == "tickets__add_comment"
    )["tool_calls"][0]["arguments"]["body"]
    receipt = json.loads(next(m for m in history if m.get("name") == "tickets__add_comment")["content"])
    return Final(
        {
            "ticket_id": ticket["ticket_id"],
            "receipt_id": receipt.get("receipt_id"),
            "sent": sent,
            "stored": ticket["comments"][-1]["body"],
        }
    )


PROGRAM = """\
from servers.crm import get_customer
from servers.tickets import list_tickets, add_comment
c = get_customer(customer_id="CUST-0042")
ticket = list_tickets(customer_id="CUST-0042", status="open")["tickets"][0]["ticket_id"]
body = f"Contact {c['name']}: {c['email']}, {c['phone']}"
r = add_comment(ticket_id=ticket, body=body)
{"ticket_id": ticket, "receipt_id": r["receipt_id"], "sent": body}
"""
READ_BACK = """\
from servers.tickets import get_ticket
get_ticket(ticket_id={ticket!r})["comments"][-1]["body"]
"""


def codemode_agent(history: list[Message]) -> Reply:
    step = assistant_turns(history)
    if step == 0:
        return turn(
            call(
                "search_tools",
                query="get customer; list tickets of a customer; comment on a ticket",
                detail="full",
                k=4,
            )
        )
    if step == 1:
        return run_code(PROGRAM)
    if step == 2:
        return run_code(READ_BACK.format(ticket=run_code_value(tool_results(history)[0])["ticket_id"]))
    written = next(m for m in history if m.get("name") == "run_code")
    return Final({**run_code_value(written["content"]), "stored": run_code_value(tool_results(history)[0])})


def check(answer: Any) -> bool:
    """The comment must hold the real email, which the model never saw: the model sent a
    placeholder, and reading the ticket back (a new run, a new placeholder key) shows a
    *different* placeholder. The same placeholder means the placeholder text itself was stored."""
    if not isinstance(answer, dict) or RAW_EMAIL.search(str(answer)) is not None:
        return False
    sent = PLACEHOLDER.findall(str(answer.get("sent", "")))
    stored = PLACEHOLDER.findall(str(answer.get("stored", "")))
    return (
        answer.get("ticket_id") == "TCK-1128"
        and str(answer.get("receipt_id", "")).startswith("trcpt_")
        and len(sent) == 1
        and len(stored) == 1
        and sent != stored
    )
