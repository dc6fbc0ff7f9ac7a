"""A branching multi-step task: what to do depends on the ticket's state."""

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

KIND = "branching multi-step (tickets -> crm or tickets)"
PROMPT = (
    "Look at ticket TCK-1017. If it is open, assign it to the customer's account manager (from the CRM). "
    "If it is closed, add a note to the customer's CRM record saying who resolved it. "
    'Answer with JSON {"action": "assign"|"note", "receipt_id": ...}.'
)


def direct_agent(history: list[Message]) -> Reply:
    step = assistant_turns(history)
    if step == 0:
        return turn(call("tickets__get_ticket", ticket_id="TCK-1017"))
    if step == 1:
        ticket = json_results(history)[0]
        if ticket["status"] == "closed":
            text = f"Ticket TCK-1017 was resolved by {ticket['assignee']}."
            return turn(call("crm__add_note", customer_id=ticket["customer_id"], text=text))
        return turn(call("crm__get_customer", customer_id=ticket["customer_id"]))
    last = json_results(history)[0]
    if "account_manager" in last:  # the open branch: now assign
        return turn(call("tickets__assign_ticket", ticket_id="TCK-1017", assignee=last["account_manager"]))
    action = "note" if str(last.get("receipt_id", "")).startswith("rcpt_") else "assign"
    return Final({"action": action, "receipt_id": last.get("receipt_id")})


PROGRAM = """\
from servers.tickets import get_ticket, assign_ticket
from servers.crm import get_customer, add_note
t = get_ticket(ticket_id="TCK-1017")
if t["status"] == "closed":
    r = add_note(customer_id=t["customer_id"], text=f"Ticket TCK-1017 was resolved by {t['assignee']}.")
    out = {"action": "note", "receipt_id": r["receipt_id"]}
else:
    manager = get_customer(customer_id=t["customer_id"])["account_manager"]
    r = assign_ticket(ticket_id="TCK-1017", assignee=manager)
    out = {"action": "assign", "receipt_id": r["receipt_id"]}
out
"""


def codemode_agent(history: list[Message]) -> Reply:
    return search_then_run(history, "get ticket; assign ticket; add customer note", PROGRAM, k=5)


def check(answer: Any) -> bool:
    # TCK-1017 is closed in the seeded data, so the right branch is a note on CUST-0127.
    return (
        isinstance(answer, dict)
        and answer.get("action") == "note"
        and str(answer.get("receipt_id", "")).startswith("rcpt_")
    )
