"""The SQLite DDL of the ledger, built from the column lists in :mod:`codemode.ledger._schema`."""

from __future__ import annotations

from codemode.ledger._schema import ADDED_COLUMNS, ADDED_TABLES, COLUMNS, Table
from codemode.ledger._states import CALL_STATES, KEY_HOLDING

# States whose row holds its idempotency key, in CALL_STATES order.
_HOLDING_SQL = "(" + ",".join(f"'{state}'" for state in CALL_STATES if state in KEY_HOLDING) + ")"


def _table_ddl(table: Table) -> str:
    columns = ",\n  ".join(f"{name} {spec}" for name, spec in COLUMNS[table].items())
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {columns}\n)"


_COLUMN_INDEXES: dict[str, str] = {
    # A run's compensations are found by the calls they undo.
    "compensates": "CREATE INDEX IF NOT EXISTS calls_compensates ON calls (compensates) "
    "WHERE compensates IS NOT NULL",
}
"""The index of an added column, created with the column (in a new ledger and an older one)."""

# -- quotas (issue 42) --------------------------------------------------------------------------
# Counters and run slots of [policy.quotas]: kept outside the hash chain (they change on every
# run and call, and say nothing a run's or call's own record does not), so verify ignores them.
QUOTA_DDL: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS quota_usage (key TEXT PRIMARY KEY, window_start TEXT NOT NULL, "
    "used INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS quota_slots (run_id TEXT PRIMARY KEY, principal TEXT NOT NULL, "
    "tenant TEXT NOT NULL, owner TEXT NOT NULL, expires_at TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS quota_slots_principal ON quota_slots (principal)",
    "CREATE INDEX IF NOT EXISTS quota_slots_tenant ON quota_slots (tenant)",
)
"""Created with a new ledger and, in place, in an older one (every statement is IF NOT EXISTS)."""
# -- end of quotas ------------------------------------------------------------------------------

# -- input rounds (issue 42) ----------------------------------------------------------------------
# A waiting run's open question and its answer, relayed between serve replicas: transport state
# outside the hash chain (it changes on every heartbeat and is pruned), so verify ignores it.
INPUT_ROUND_DDL: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS input_rounds (round_key TEXT PRIMARY KEY, principal TEXT NOT NULL, "
    "tenant TEXT NOT NULL, replica TEXT NOT NULL, state TEXT NOT NULL, asked_at TEXT NOT NULL, "
    "expires_at TEXT NOT NULL, heartbeat_at TEXT NOT NULL, answer_json TEXT, outcome_json TEXT)",
    "CREATE INDEX IF NOT EXISTS input_rounds_replica ON input_rounds (replica, state)",
    "CREATE INDEX IF NOT EXISTS input_rounds_heartbeat ON input_rounds (heartbeat_at)",
)
"""Created with a new ledger and, in place, in an older one (every statement is IF NOT EXISTS)."""
# -- end of input rounds --------------------------------------------------------------------------

APPEND_ONLY_DELETE = (
    "CREATE TRIGGER IF NOT EXISTS events_append_only_delete BEFORE DELETE ON events "
    "BEGIN SELECT RAISE(ABORT, 'ledger events are append-only'); END"
)
"""The guard against deleting events; archiving (:meth:`SqliteTransaction.drop_archived`) drops
and re-creates it inside its own transaction, so no other statement ever runs without it."""

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
    APPEND_ONLY_DELETE,
    _table_ddl("runs"),
    _table_ddl("calls"),
    _table_ddl("approvals"),
    _table_ddl("mcp_sessions"),
    _table_ddl("plans"),
    _table_ddl("skills"),
    _table_ddl("workspaces"),
    _table_ddl("approval_tickets"),
    _table_ddl("sandbox_sessions"),
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
    *_COLUMN_INDEXES.values(),
    *QUOTA_DDL,
    *INPUT_ROUND_DDL,
)


def added_columns(table: Table, present: set[str]) -> list[str]:
    """``ALTER TABLE`` statements for the columns of :data:`ADDED_COLUMNS` that ``table`` lacks
    (each followed by its index, if it has one)."""
    statements: list[str] = []
    for name in ADDED_COLUMNS.get(table, ()):
        if name not in present:
            statements.append(f"ALTER TABLE {table} ADD COLUMN {name} {COLUMNS[table][name]}")
            statements += [_COLUMN_INDEXES[name]] if name in _COLUMN_INDEXES else []
    return statements


def added_tables() -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` for the tables of :data:`ADDED_TABLES` (a no-op for those
    a ledger already has)."""
    return [_table_ddl(table) for table in ADDED_TABLES]
