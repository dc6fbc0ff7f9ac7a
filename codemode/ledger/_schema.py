"""The SQLite schema: an append-only event log, its head, and tables derived from the events.

Column lists are defined once here; the DDL, the reducer's empty rows and ``verify``'s
row comparison all come from them, so they cannot drift apart.

Values in the derived tables are only TEXT and INTEGER (never REAL): times are fixed-width
UTC strings and JSON values are canonical JSON text. That makes "re-derive from the events
and compare" an exact equality, with no float formatting in the way.
"""

from __future__ import annotations

from typing import Literal

from codemode.ledger._models import CALL_STATES, KEY_HOLDING

SCHEMA_VERSION = 1

Table = Literal["runs", "calls", "approvals"]

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
    "receipt": "TEXT",
    "retry_after": "TEXT",
    "evidence": "TEXT",
    "resolved_by": "TEXT",
    "updated_at": "TEXT NOT NULL",
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

COLUMNS: dict[Table, dict[str, str]] = {
    "runs": RUN_COLUMNS,
    "calls": CALL_COLUMNS,
    "approvals": APPROVAL_COLUMNS,
}
PRIMARY_KEY: dict[Table, str] = {table: next(iter(cols)) for table, cols in COLUMNS.items()}

# States whose row holds its idempotency key, in CALL_STATES order.
_HOLDING_SQL = "(" + ",".join(f"'{state}'" for state in CALL_STATES if state in KEY_HOLDING) + ")"


def _table_ddl(table: Table) -> str:
    columns = ",\n  ".join(f"{name} {spec}" for name, spec in COLUMNS[table].items())
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {columns}\n)"


DDL: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # seq is assigned by the writer (head + 1), never by AUTOINCREMENT: a gap then means a
    # deleted event, not a rolled-back insert.
    """CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY,
  at TEXT NOT NULL,
  kind TEXT NOT NULL,
  subject TEXT NOT NULL,
  payload TEXT NOT NULL,
  prev_hash TEXT NOT NULL,
  hash TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS events_subject ON events (subject, seq)",
    "CREATE TABLE IF NOT EXISTS head (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL, "
    "hash TEXT NOT NULL)",
    # Guard rails against casual edits with the sqlite3 shell. They are not security: anyone
    # who can write the file can drop them. Tamper-evidence comes from the hash chain.
    "CREATE TRIGGER IF NOT EXISTS events_append_only_update BEFORE UPDATE ON events "
    "BEGIN SELECT RAISE(ABORT, 'ledger events are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS events_append_only_delete BEFORE DELETE ON events "
    "BEGIN SELECT RAISE(ABORT, 'ledger events are append-only'); END",
    _table_ddl("runs"),
    _table_ddl("calls"),
    _table_ddl("approvals"),
    "CREATE INDEX IF NOT EXISTS calls_run ON calls (run_id, created_at)",
    "CREATE INDEX IF NOT EXISTS calls_state ON calls (state)",
    "CREATE INDEX IF NOT EXISTS calls_receipt ON calls (receipt) WHERE receipt IS NOT NULL",
    # One attempt number per key, and at most one row holding a key at any time. reserve()
    # checks both inside BEGIN IMMEDIATE; the indexes make a bug there fail loudly instead of
    # executing twice.
    "CREATE UNIQUE INDEX IF NOT EXISTS calls_key_attempt ON calls (idem_key, attempt) "
    "WHERE idem_key IS NOT NULL AND attempt IS NOT NULL",
    f"CREATE UNIQUE INDEX IF NOT EXISTS calls_key_holder ON calls (idem_key) "
    f"WHERE idem_key IS NOT NULL AND state IN {_HOLDING_SQL}",
    "CREATE INDEX IF NOT EXISTS calls_key ON calls (idem_key, attempt)",
    "CREATE INDEX IF NOT EXISTS runs_started ON runs (started_at)",
)
