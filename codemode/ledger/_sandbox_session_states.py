"""The moves of a sandbox session's row: opened, used again and again, closed, and opened again
(by any replica) once closed or released.

One table, read by the reducer, so an illegal move is refused before it is written and again
when ``verify`` replays the log. Whose session it is (tenant, principal, session id) is fixed when
the row is created: the row's key is a digest of exactly those. Whether a held row's holder is
gone (its lease ran out, its process died) is decided when a replica claims it
(:mod:`codemode.ledger._sandbox_sessions`), not here: a replay has no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

SANDBOX_SESSION_EVENTS: Final[dict[str, frozenset[str | None]]] = {
    # event kind -> the states it may start from ("held", "closed"; None: no row yet)
    "sandbox_session_opened": frozenset({None}),
    # Opened again: a closed row, or a held one whose holder is gone.
    "sandbox_session_reopened": frozenset({"held", "closed"}),
    "sandbox_session_used": frozenset({"held"}),
    "sandbox_session_closed": frozenset({"held"}),
}

_IDENTITY: Final = ("tenant", "principal", "session_id")
_HOLDER: Final = frozenset({"replica", "owner", "opened_at", "last_used", "lease_expires_at", "closed_at"})


def _state(row: Mapping[str, Any] | None) -> str | None:
    if row is None:
        return None
    return "held" if row["closed_at"] is None else "closed"


def sandbox_session_event_problem(
    kind: str, current: Mapping[str, Any] | None, fields: Mapping[str, Any], new: Mapping[str, Any]
) -> str | None:
    """Why ``kind`` cannot move the session's row from ``current`` to ``new``; None if it can."""
    state = _state(current)
    if state not in SANDBOX_SESSION_EVENTS[kind]:
        return f"{kind}: the sandbox session is {state or 'not recorded'}"
    if current is not None and any(name in fields for name in _IDENTITY):
        return f"{kind} must not change whose sandbox session it is"
    if kind == "sandbox_session_used" and set(fields) != {"last_used", "lease_expires_at"}:
        return "sandbox_session_used records only its last use and its lease"
    if kind == "sandbox_session_closed" and (set(fields) != {"closed_at"} or new["closed_at"] is None):
        return "sandbox_session_closed records only when it closed"
    if kind in ("sandbox_session_opened", "sandbox_session_reopened"):
        if kind == "sandbox_session_reopened" and frozenset(fields) != _HOLDER:
            return "sandbox_session_reopened records its new holder, all of it"
        if new["closed_at"] is not None:
            return f"{kind} leaves the sandbox session open"
    return None
