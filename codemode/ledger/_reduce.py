"""The one function that turns events into rows.

Every change to the ledger is an event whose payload is the set of columns it writes. The
writer runs :func:`reduce` on the current row to get the new one (and to refuse illegal
state changes *before* anything is written); ``verify`` runs the same function over the whole
log from scratch and compares the result with the tables. One reducer for both means "the
tables are derived from the events" is checked, not just claimed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from codemode.ledger._schema import COLUMNS, PRIMARY_KEY, Table
from codemode.ledger._skill_states import SKILL_EVENTS, skill_event_problem
from codemode.ledger._states import CALL_EVENTS, NEW, check_call_event
from codemode.ledger._states import CALL_TRANSITIONS as CALL_TRANSITIONS  # the old home of the table
from codemode.ledger._ticket_states import TICKET_EVENTS, ticket_event_problem
from codemode.ledger._workspace_states import WORKSPACE_EVENTS, workspace_event_problem

Row = dict[str, str | int | None]
Op = Literal["create", "update"]

EVENT_KINDS: dict[str, tuple[Table, Op]] = {
    "run_started": ("runs", "create"),
    "run_finished": ("runs", "update"),
    "run_interrupted": ("runs", "update"),
    # Call events: their moves are in _states.CALL_EVENTS; those starting from NEW create the row.
    **{
        kind: ("calls", "create" if NEW in event.sources else "update") for kind, event in CALL_EVENTS.items()
    },
    "approval_recorded": ("approvals", "create"),
    "approval_consumed": ("approvals", "update"),
    # A session's binding never changes: a second event for it would rebind someone's session.
    "mcp_session_bound": ("mcp_sessions", "create"),
    # A plan is written once; what it holds never changes (an edit would change what was approved).
    "plan_recorded": ("plans", "create"),
    "plan_approved": ("plans", "update"),
    "plan_revoked": ("plans", "update"),
    # Skill versions: their moves are in _skill_states.SKILL_EVENTS.
    **{kind: ("skills", "create" if None in event[0] else "update") for kind, event in SKILL_EVENTS.items()},
    # Workspaces' rows: their moves are in _workspace_states.WORKSPACE_EVENTS.
    **{
        kind: ("workspaces", "create" if None in sources else "update")
        for kind, sources in WORKSPACE_EVENTS.items()
    },
    # Approval tickets: their moves are in _ticket_states.TICKET_EVENTS.
    **{
        kind: ("approval_tickets", "create" if source is None else "update")
        for kind, source in TICKET_EVENTS.items()
    },
}


class ReduceError(Exception):
    """An event that cannot apply to the current state (an illegal transition, a bad field)."""


def empty_row(table: Table) -> Row:
    return dict.fromkeys(COLUMNS[table])


def _check_fields(table: Table, fields: Mapping[str, Any]) -> None:
    columns = COLUMNS[table]
    for name, value in fields.items():
        if name not in columns:
            raise ReduceError(f"unknown column {table}.{name}")
        # bool is an int subclass; refuse it (and floats) so rows compare exactly after a replay.
        if value is not None and (isinstance(value, bool) or not isinstance(value, str | int)):
            raise ReduceError(f"{table}.{name} must be text, an integer or null, not {type(value).__name__}")


def _check_call(kind: str, current: Row | None, new: Row) -> None:
    why = check_call_event(kind, None if current is None else str(current["state"]), new["state"])
    if why is not None:
        raise ReduceError(why)


def _check_run(kind: str, current: Row | None, new: Row) -> None:
    if kind == "run_started":
        if new["status"] != "running":
            raise ReduceError("a run starts in status running")
    elif current is None or current["status"] != "running":
        status = None if current is None else current["status"]
        raise ReduceError(f"{kind}: the run is already finished (status {status})")
    elif new["status"] == "running":
        raise ReduceError(f"{kind} must set a final status")


def _check_approval(kind: str, current: Row | None, new: Row) -> None:
    if kind == "approval_recorded":
        if new["used_at"] is not None:
            raise ReduceError("an approval is recorded unused")
    elif current is None or current["used_at"] is not None:
        raise ReduceError("the approval is already used")
    elif new["used_at"] is None or new["used_by_call"] is None:
        raise ReduceError("consuming an approval records when and by which call")


_PLAN_APPROVAL = ("approved_digest", "approved_by", "approved_at", "approval_expires_at")


def _check_plan(kind: str, current: Row | None, new: Row) -> None:
    """A plan's content never changes; it is approved at most once, and revoked at most once."""
    if current is not None:
        changed = [name for name in current if current[name] != new[name]]
        allowed = {"plan_approved": (*_PLAN_APPROVAL, "approval_note"), "plan_revoked": ("revoked_at",)}
        if any(name not in allowed.get(kind, ()) for name in changed):
            raise ReduceError(f"{kind} may not change {sorted(changed)}")
        if current["revoked_at"] is not None:
            raise ReduceError("the plan is revoked")
    if kind == "plan_recorded" and any(new[name] is not None for name in (*_PLAN_APPROVAL, "revoked_at")):
        raise ReduceError("a plan is recorded unapproved")
    if kind == "plan_approved":
        assert current is not None
        if current["approved_at"] is not None:
            raise ReduceError("the plan is approved already")
        if any(new[name] is None for name in _PLAN_APPROVAL):
            raise ReduceError("approving a plan records its digest, by whom, when and until when")
    if kind == "plan_revoked" and new["revoked_at"] is None:
        raise ReduceError("revoking a plan records when")


def reduce(kind: str, subject: str, fields: Mapping[str, Any], current: Row | None) -> tuple[Table, Row]:
    """Apply one event to the current row of its subject (None if none); return the new row."""
    try:
        table, op = EVENT_KINDS[kind]
    except KeyError:
        raise ReduceError(f"unknown event kind {kind!r}") from None
    _check_fields(table, fields)
    key = PRIMARY_KEY[table]
    if op == "create":
        if current is not None:
            raise ReduceError(f"{table} row {subject!r} already exists")
        if fields.get(key) != subject:
            raise ReduceError(f"{kind}: {key} must equal the event subject {subject!r}")
        new = empty_row(table)
        new.update(fields)
    else:
        if current is None:
            raise ReduceError(f"{kind}: no {table} row {subject!r}")
        if key in fields and fields[key] != subject:
            raise ReduceError(f"{kind} must not change the {key}")
        new = dict(current)
        new.update(fields)
    for name, spec in COLUMNS[table].items():
        if "NOT NULL" in spec and new[name] is None:
            raise ReduceError(f"{kind}: {table}.{name} must not be null")
    if table == "calls":
        _check_call(kind, current, new)
    elif table == "runs":
        _check_run(kind, current, new)
    elif table == "approvals":
        _check_approval(kind, current, new)
    elif table == "plans":
        _check_plan(kind, current, new)
    elif table == "skills":
        why = skill_event_problem(kind, current, fields, new)
        if why is not None:
            raise ReduceError(why)
    elif table == "workspaces":
        why = workspace_event_problem(kind, current, fields, new)
        if why is not None:
            raise ReduceError(why)
    elif table == "approval_tickets":
        why = ticket_event_problem(kind, current, fields, new)
        if why is not None:
            raise ReduceError(why)
    # mcp_sessions: "create" only, checked above (a second binding of a session is refused).
    return table, new
