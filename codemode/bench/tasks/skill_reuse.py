"""A saved skill, reused: one job solved and saved as a skill, then three variations of it.

Without skills every job is solved from scratch (code mode: search the tools, write the whole
program). With skills the first job's program is also proposed as a skill (the bench approves
it, as the person reviewing it would), and each variation reads the skill and calls it."""

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
    run_code,
    run_code_value,
    search_then_run,
    tool_results,
    turn,
)

KIND = "a job saved as a skill, then three variations (docs x tickets)"
SKILL = "tickets_by_risk"
"""The skill the first job saves; its variations import it."""


def _prompt(risk: str, status: str) -> str:
    return (
        f"How many customers in the renewals-2026 sheet with risk '{risk}' have tickets with status "
        f"'{status}', and how many such tickets do they have in all? "
        'Answer with JSON {"customers": <count>, "tickets": <count>}.'
    )


PROMPT = _prompt("high", "open")
VARIATIONS = [_prompt("medium", "open"), _prompt("high", "in_progress"), _prompt("low", "in_progress")]
EXPECTED = {
    PROMPT: {"customers": 4, "tickets": 5},
    VARIATIONS[0]: {"customers": 17, "tickets": 25},
    VARIATIONS[1]: {"customers": 5, "tickets": 6},
    VARIATIONS[2]: {"customers": 35, "tickets": 50},
}

SKILL_SOURCE = '''\
"""Renewal risk against tickets: which customers of a risk level have tickets in a status."""

from servers.docs import query_sheet
from servers.tickets import list_tickets


def tickets_by_risk(risk: str, status: str = "open", sheet_id: str = "renewals-2026") -> dict[str, int]:
    """The customers of sheet ``sheet_id`` whose risk is ``risk``, each with its number of
    tickets in ``status`` (only customers with at least one such ticket)."""
    rows = query_sheet(sheet_id=sheet_id, column="risk", equals=risk, limit=500)["rows"]
    wanted = {row["customer_id"] for row in rows}
    counts: dict[str, int] = {}
    cursor = None
    while True:
        page = list_tickets(status=status, limit=200, cursor=cursor)
        for ticket in page["tickets"]:
            if ticket["customer_id"] in wanted:
                counts[ticket["customer_id"]] = counts.get(ticket["customer_id"], 0) + 1
        cursor = page["next_cursor"]
        if not cursor:
            return dict(sorted(counts.items()))
'''
SEARCH = "query spreadsheet rows; list tickets by status"


def _job(history: list[Message]) -> tuple[str, str]:
    """The risk and status the job's prompt asks about."""
    found = re.search(r"risk '(\w+)' have tickets with status '(\w+)'", str(history[0]["content"]))
    if found is None:
        raise ValueError("not one of this task's jobs")
    return found.group(1), found.group(2)


def _answer(risk: str, status: str) -> str:
    return (
        f"found = tickets_by_risk({risk!r}, {status!r})\n"
        '{"customers": len(found), "tickets": sum(found.values())}\n'
    )


def direct_agent(history: list[Message]) -> Reply:
    # One filtered read of the sheet, then every ticket in the status (paged), joined in its head.
    risk, status = _job(history)
    step = assistant_turns(history)
    if step == 0:
        return turn(
            call("docs__query_sheet", sheet_id="renewals-2026", column="risk", equals=risk, limit=500),
            call("tickets__list_tickets", status=status, limit=200),
        )
    last = json.loads(tool_results(history)[-1])
    if last.get("next_cursor"):
        return turn(call("tickets__list_tickets", status=status, limit=200, cursor=last["next_cursor"]))
    wanted: set[str] = set()
    counts: dict[str, int] = {}
    for message in history:
        if message.get("name") == "docs__query_sheet":
            wanted = {r["customer_id"] for r in json.loads(message["content"])["rows"]}
        if message.get("name") == "tickets__list_tickets":
            for ticket in json.loads(message["content"])["tickets"]:
                counts[ticket["customer_id"]] = counts.get(ticket["customer_id"], 0) + 1
    found = {c: n for c, n in counts.items() if c in wanted}
    return Final({"customers": len(found), "tickets": sum(found.values())})


def codemode_agent(history: list[Message]) -> Reply:
    # Every job from scratch: search the tools, write the whole program.
    return search_then_run(history, SEARCH, SKILL_SOURCE + "\n" + _answer(*_job(history)), k=4)


def skills_agent(history: list[Message]) -> Reply:
    """The first job is solved as from scratch and its program proposed as a skill; each
    variation reads the approved skill's signature and calls it."""
    risk, status = _job(history)
    if history[0]["content"] == PROMPT:
        about = "customers of a risk level with tickets in a status"
        proposing = (
            SKILL_SOURCE
            + "\nimport codemode\n"
            + f"codemode.propose_skill({SKILL!r}, {SKILL_SOURCE!r}, {about!r})\n"
            + _answer(risk, status)
        )
        return search_then_run(history, SEARCH, proposing, k=4)
    step = assistant_turns(history)
    if step == 0:
        return turn(call("read_file", path=f"skills/{SKILL}.py"))
    if step == 1:
        return run_code(f"from skills.{SKILL} import {SKILL}\n" + _answer(risk, status))
    return Final(run_code_value(tool_results(history)[0]))


def check(answer: Any, prompt: str = PROMPT) -> bool:
    return answer == EXPECTED[prompt]
