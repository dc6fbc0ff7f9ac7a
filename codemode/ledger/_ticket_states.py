"""The moves of an approval ticket's row: opened, then exactly one of answered, withdrawn or
expired, never again.

One table, read by the reducer, so an illegal move (a second answer, an answer to a withdrawn
ticket) is refused before it is written and again when ``verify`` replays the log. What the
ticket asks (the call, its arguments' digest, its expiry, the replica holding its run) is fixed
when it is opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

TICKET_EVENTS: Final[dict[str, str | None]] = {
    # event kind -> the state it must start from (None: no row yet)
    "approval_ticket_opened": None,
    "approval_ticket_answered": "open",
    "approval_ticket_withdrawn": "open",
    "approval_ticket_expired": "open",
}

_ENDS: Final = {
    "approval_ticket_answered": "answered",
    "approval_ticket_withdrawn": "withdrawn",
    "approval_ticket_expired": "expired",
}
_ANSWER: Final = ("approved", "answered_by", "answered_on")


def ticket_event_problem(
    kind: str, current: Mapping[str, Any] | None, fields: Mapping[str, Any], new: Mapping[str, Any]
) -> str | None:
    """Why ``kind`` cannot move the ticket's row from ``current`` to ``new``; None if it can."""
    state = None if current is None else current["state"]
    if state != TICKET_EVENTS[kind]:
        return f"{kind}: the ticket is {state or 'not recorded'}"
    if kind == "approval_ticket_opened":
        if new["state"] != "open" or any(new[name] is not None for name in (*_ANSWER, "closed_at")):
            return "a ticket is opened open and unanswered"
        return None
    allowed = {"state", "closed_at", *(_ANSWER if kind == "approval_ticket_answered" else ())}
    if set(fields) - allowed:
        return f"{kind} may not change {sorted(set(fields) - allowed)}"
    if new["state"] != _ENDS[kind] or new["closed_at"] is None:
        return f"{kind} records the state {_ENDS[kind]} and when"
    if kind == "approval_ticket_answered" and (
        new["approved"] not in (0, 1) or new["answered_by"] is None or new["answered_on"] is None
    ):
        return "an answer records approve (1) or deny (0), by whom and on which replica"
    return None
