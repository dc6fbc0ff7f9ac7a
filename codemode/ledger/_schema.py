"""The ledger's tables, for every store: an append-only event log, its head, and the tables
derived from the events (``runs``, ``calls``, ``approvals``, ``mcp_sessions``, ``plans``,
``skills``, ``workspaces``, ``approval_tickets``).

Column lists are defined once here; each store's DDL (:mod:`.stores._sqlite_ddl` for SQLite), the
reducer's empty rows and ``verify``'s row comparison all come from them, so they cannot drift
apart. The SQL types are SQLite's spelling; another store maps ``TEXT``/``INTEGER`` to its own.

Values in the derived tables are only TEXT and INTEGER (never REAL): times are fixed-width
UTC strings and JSON values are canonical JSON text. That makes "re-derive from the events
and compare" an exact equality, with no float formatting in the way.
"""

from __future__ import annotations

from typing import Literal

SCHEMA_VERSION = 1

Table = Literal[
    "runs", "calls", "approvals", "mcp_sessions", "plans", "skills", "workspaces", "approval_tickets"
]

# name -> SQL type and constraint. The first column is the primary key.
RUN_COLUMNS: dict[str, str] = {
    "run_id": "TEXT PRIMARY KEY",
    "principal": "TEXT NOT NULL",
    "tenant": "TEXT NOT NULL",
    "trace_id": "TEXT NOT NULL",
    "session_id": "TEXT",
    "code_digest": "TEXT NOT NULL",
    "status": "TEXT NOT NULL",
    "summary_json": "TEXT",
    "owner": "TEXT",
    "started_at": "TEXT NOT NULL",
    "finished_at": "TEXT",
}

CALL_COLUMNS: dict[str, str] = {
    "call_id": "TEXT PRIMARY KEY",
    "run_id": "TEXT NOT NULL",
    "attempt": "INTEGER",
    "trace_id": "TEXT NOT NULL",
    "principal": "TEXT NOT NULL",
    "tenant": "TEXT NOT NULL",
    "server": "TEXT NOT NULL",
    "tool": "TEXT NOT NULL",
    "schema_hash": "TEXT NOT NULL",
    "tool_version": "TEXT",
    "idem_key": "TEXT",
    "args_digest": "TEXT NOT NULL",
    "args_json": "TEXT",
    "resource_scope": "TEXT",
    "approval_id": "TEXT",
    "state": "TEXT NOT NULL",
    "gate": "TEXT",
    "reason": "TEXT",
    "replay_of": "TEXT",
    "owner": "TEXT",
    "lease_expires_at": "TEXT",
    "created_at": "TEXT NOT NULL",
    "sent_at": "TEXT",
    "completed_at": "TEXT",
    "outcome_kind": "TEXT",
    "result_json": "TEXT",
    "result_digest": "TEXT",
    "result_bytes": "INTEGER",
    "result_truncated": "INTEGER NOT NULL",
    "filter_json": "TEXT",
    "inputs_json": "TEXT",
    "receipt": "TEXT",
    "retry_after": "TEXT",
    "evidence": "TEXT",
    "resolved_by": "TEXT",
    "updated_at": "TEXT NOT NULL",
    "skill": "TEXT",
    "compensates": "TEXT",
}

APPROVAL_COLUMNS: dict[str, str] = {
    "approval_id": "TEXT PRIMARY KEY",
    "tenant": "TEXT NOT NULL",
    "principal": "TEXT NOT NULL",
    "server": "TEXT NOT NULL",
    "tool": "TEXT NOT NULL",
    "args_digest": "TEXT NOT NULL",
    "risk": "TEXT NOT NULL",
    "call_id": "TEXT",
    "approver": "TEXT NOT NULL",
    "issued_at": "TEXT NOT NULL",
    "expires_at": "TEXT NOT NULL",
    "note": "TEXT",
    "used_at": "TEXT",
    "used_by_call": "TEXT",
}

MCP_SESSION_COLUMNS: dict[str, str] = {
    "session_digest": "TEXT PRIMARY KEY",
    "principal": "TEXT NOT NULL",
    "tenant": "TEXT NOT NULL",
    "owner": "TEXT NOT NULL",
    "bound_at": "TEXT NOT NULL",
}
"""Which principal and tenant opened each MCP session of ``codemode serve`` (by a digest of the
session id, never the id itself), so every replica sharing the ledger refuses other callers."""

# -- plans (a dry run's planned calls; see codemode/ledger/_plans.py) ---------------------------

PLAN_COLUMNS: dict[str, str] = {
    "plan_id": "TEXT PRIMARY KEY",
    "run_id": "TEXT NOT NULL",
    "principal": "TEXT NOT NULL",
    "tenant": "TEXT NOT NULL",
    "code_digest": "TEXT NOT NULL",
    "calls_json": "TEXT NOT NULL",
    "reads_json": "TEXT NOT NULL",
    "code": "TEXT NOT NULL",
    "created_at": "TEXT NOT NULL",
    "expires_at": "TEXT NOT NULL",
    "approved_digest": "TEXT",
    "approved_by": "TEXT",
    "approved_at": "TEXT",
    "approval_expires_at": "TEXT",
    "approval_note": "TEXT",
    "revoked_at": "TEXT",
}
"""What a dry run (``codemode run --plan``) would do: the calls it planned instead of sending and
the reads it made, bound to the program's digest and to who ran it, until it expires; then its
approval, once (``codemode approve --plan``): bound to a digest of the code and of every planned
call's tool, argument digest and occurrence, until it expires or is revoked. ``code`` is the program
as a person reviews it (secrets hidden)."""
# -- skills (issue 41) ---------------------------------------------------------------------------
SKILL_COLUMNS: dict[str, str] = {
    "skill_id": "TEXT PRIMARY KEY",
    "tenant": "TEXT NOT NULL",
    "name": "TEXT NOT NULL",
    "version": "INTEGER NOT NULL",
    "description": "TEXT NOT NULL",
    "source": "TEXT NOT NULL",
    "digest": "TEXT NOT NULL",
    "pin": "TEXT NOT NULL",
    "deps_json": "TEXT NOT NULL",
    "status": "TEXT NOT NULL",
    "proposed_by": "TEXT NOT NULL",
    "proposed_in_run": "TEXT",
    "proposed_at": "TEXT NOT NULL",
    "approved_by": "TEXT",
    "approved_at": "TEXT",
    "revoked_by": "TEXT",
    "revoked_at": "TEXT",
    "note": "TEXT",
}
"""One version of a saved skill of a tenant (``skill_id`` is ``<tenant>::<name>@<version>``).
A version's source and dependency pins never change; only its status moves, proposed ->
approved -> revoked (or proposed -> revoked), each move one event."""
# -- end of skills ------------------------------------------------------------------------------

# -- workspaces (issue 41; see codemode/ledger/_workspaces.py) -----------------------------------
WORKSPACE_COLUMNS: dict[str, str] = {
    "workspace_id": "TEXT PRIMARY KEY",
    "tenant": "TEXT NOT NULL",
    "principal": "TEXT NOT NULL",
    "session_id": "TEXT",
    "version": "TEXT",
    "files": "INTEGER NOT NULL",
    "bytes": "INTEGER NOT NULL",
    "created_at": "TEXT NOT NULL",
    "last_used": "TEXT NOT NULL",
    "removed_at": "TEXT",
}
"""Who a workspace belongs to and what it holds: ``workspace_id`` is the name of its folder under
``[workspace] root`` (a digest of tenant, principal and session), ``version`` the folder of its
live files there (null once removed). The files themselves never enter the ledger."""

# -- approval tickets (issue 42; see codemode/ledger/_tickets.py) -------------------------------
APPROVAL_TICKET_COLUMNS: dict[str, str] = {
    "call_id": "TEXT PRIMARY KEY",
    "run_id": "TEXT NOT NULL",
    "tenant": "TEXT NOT NULL",
    "principal": "TEXT NOT NULL",
    "server": "TEXT NOT NULL",
    "tool": "TEXT NOT NULL",
    "risk": "TEXT NOT NULL",
    "why": "TEXT NOT NULL",
    "arguments_summary": "TEXT NOT NULL",
    "args_digest": "TEXT NOT NULL",
    "expires_at": "TEXT NOT NULL",
    "replica": "TEXT NOT NULL",
    "opened_at": "TEXT NOT NULL",
    "state": "TEXT NOT NULL",
    "approved": "INTEGER",
    "answered_by": "TEXT",
    "answered_on": "TEXT",
    "closed_at": "TEXT",
}
"""A call waiting for a person's approval while its run waits on ``replica``, as every serve
replica's console shows it; then how it left the desk (``state`` answered, withdrawn or expired,
``closed_at``) and, when answered, the answer: ``approved`` (1 or 0), by which operator, on which
replica. A ticket is not an approval: the run's approval flow records that in ``approvals``."""

COLUMNS: dict[Table, dict[str, str]] = {
    "runs": RUN_COLUMNS,
    "calls": CALL_COLUMNS,
    "approvals": APPROVAL_COLUMNS,
    "mcp_sessions": MCP_SESSION_COLUMNS,
    "plans": PLAN_COLUMNS,
    "skills": SKILL_COLUMNS,
    "workspaces": WORKSPACE_COLUMNS,
    "approval_tickets": APPROVAL_TICKET_COLUMNS,
}
PRIMARY_KEY: dict[Table, str] = {table: next(iter(cols)) for table, cols in COLUMNS.items()}

ADDED_COLUMNS: dict[Table, tuple[str, ...]] = {
    "calls": ("tool_version", "filter_json", "inputs_json", "skill", "compensates"),
}
"""Nullable columns that schema version 1 gained after ledgers were first written with it.

A store adds the ones that an older file or database lacks when it opens it. No event written
before held them, so re-deriving those rows gives NULL, which is what the added column holds:
``verify`` stays exact, and the version need not change for an addition that loses nothing.
"""

ADDED_TABLES: tuple[Table, ...] = ("mcp_sessions", "plans", "skills", "workspaces", "approval_tickets")
"""Tables that schema version 1 gained after ledgers were first written with it.

A store creates the ones an older file or database lacks when it opens it. No event written
before was of their kinds, so re-deriving them gives no rows, which is what a new table holds:
``verify`` stays exact here too.
"""
