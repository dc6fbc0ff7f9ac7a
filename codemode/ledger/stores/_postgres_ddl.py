"""The PostgreSQL DDL of the ledger, built from the column lists in :mod:`codemode.ledger._schema`.

Identifiers are quoted by psycopg (:class:`psycopg.sql.Identifier`) and every piece of SQL text
is a literal here, so nothing from outside can reach the statements.
:mod:`codemode.ledger._schema` spells types the SQLite way; :data:`_TYPES` maps them and refuses
any it does not know, so a new column type cannot slip into PostgreSQL with a different meaning.
"""

from __future__ import annotations

from typing import LiteralString

from psycopg import sql

from codemode.ledger._schema import ADDED_COLUMNS, ADDED_TABLES, COLUMNS, Table
from codemode.ledger._states import CALL_STATES, KEY_HOLDING

# TEXT is compared and sorted byte by byte (COLLATE "C"), as SQLite's BINARY collation does:
# times are compared as fixed-width strings and "ORDER BY started_at, run_id" must not depend
# on the database's locale. INTEGER is SQLite's 64-bit integer, i.e. BIGINT.
_TYPES: dict[str, LiteralString] = {"TEXT": 'TEXT COLLATE "C"', "INTEGER": "BIGINT"}
_CONSTRAINTS: dict[str, LiteralString] = {"": "", "NOT NULL": " NOT NULL", "PRIMARY KEY": " PRIMARY KEY"}

INSERT_ORDER = "insert_order"
"""A column of ``calls`` and ``approvals`` outside :mod:`codemode.ledger._schema`: SQLite's
``rowid``, the tie-breaker of "in insertion order". Writers are serialised, so its order is
commit order."""

APPEND_ONLY_TRIGGERS = ("events_append_only", "events_no_truncate")
GUARD_INDEXES = ("calls_key_attempt", "calls_key_holder")

Statement = sql.SQL | sql.Composed
"""What psycopg executes: literal SQL, or literal SQL with quoted identifiers and values."""


def _column(name: str, spec: str) -> sql.Composable:
    kind, _, constraint = spec.partition(" ")
    if kind not in _TYPES or constraint not in _CONSTRAINTS:
        raise ValueError(f"no PostgreSQL mapping for column {name} {spec!r}")
    return sql.SQL("{} {}{}").format(
        sql.Identifier(name), sql.SQL(_TYPES[kind]), sql.SQL(_CONSTRAINTS[constraint])
    )


def _table(table: Table) -> sql.Composed:
    columns = [_column(name, spec) for name, spec in COLUMNS[table].items()]
    if table != "runs":
        columns.append(sql.SQL("{} BIGINT GENERATED ALWAYS AS IDENTITY").format(sql.Identifier(INSERT_ORDER)))
    # No IF NOT EXISTS: DDL runs in the creating transaction, so a table that already exists is
    # someone else's (a shared database), and adopting it would only fail later and stranger.
    return sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table), sql.SQL(", ").join(columns))


def _index(name: str, table: str, columns: tuple[str, ...], *, unique: bool = False) -> sql.Composed:
    return sql.SQL("CREATE {}INDEX {} ON {} ({})").format(
        sql.SQL("UNIQUE " if unique else ""),
        sql.Identifier(name),
        sql.Identifier(table),
        sql.SQL(", ").join(sql.Identifier(c) for c in columns),
    )


_HOLDING = sql.SQL(", ").join(sql.Literal(state) for state in CALL_STATES if state in KEY_HOLDING)

_COLUMN_INDEXES: dict[str, Statement] = {
    # A run's compensations are found by the calls they undo.
    "compensates": sql.SQL(
        'CREATE INDEX calls_compensates ON calls ("compensates") WHERE "compensates" IS NOT NULL'
    ),
}
"""The index of an added column, created with the column (in a new ledger and an older one)."""

# -- quotas (issue 42) --------------------------------------------------------------------------
# Counters and run slots of [policy.quotas]: outside the hash chain, so verify ignores them.
QUOTA_TABLES: dict[str, tuple[Statement, ...]] = {
    "quota_usage": (
        sql.SQL(
            'CREATE TABLE quota_usage (key TEXT COLLATE "C" PRIMARY KEY, '
            'window_start TEXT COLLATE "C" NOT NULL, used BIGINT NOT NULL)'
        ),
    ),
    "quota_slots": (
        sql.SQL(
            'CREATE TABLE quota_slots (run_id TEXT COLLATE "C" PRIMARY KEY, principal TEXT COLLATE "C" '
            'NOT NULL, tenant TEXT COLLATE "C" NOT NULL, owner TEXT NOT NULL, expires_at TEXT COLLATE "C" '
            "NOT NULL)"
        ),
        _index("quota_slots_principal", "quota_slots", ("principal",)),
        _index("quota_slots_tenant", "quota_slots", ("tenant",)),
    ),
}
"""Each quota table with its indexes: created with a new ledger, and in place in an older one."""


def added_quota_tables(present: set[str]) -> list[Statement]:
    """The statements creating the quota tables not in ``present``."""
    return [statement for table, ddl in QUOTA_TABLES.items() if table not in present for statement in ddl]


# -- end of quotas ------------------------------------------------------------------------------

# -- input rounds (issue 42) ----------------------------------------------------------------------
# A waiting run's open question and its answer, relayed between serve replicas: outside the hash
# chain (it changes on every heartbeat and is pruned), so verify ignores it.
INPUT_ROUND_TABLES: dict[str, tuple[Statement, ...]] = {
    "input_rounds": (
        sql.SQL(
            'CREATE TABLE input_rounds (round_key TEXT COLLATE "C" PRIMARY KEY, principal TEXT COLLATE "C" '
            'NOT NULL, tenant TEXT COLLATE "C" NOT NULL, replica TEXT COLLATE "C" NOT NULL, '
            'state TEXT COLLATE "C" NOT NULL, asked_at TEXT COLLATE "C" NOT NULL, '
            'expires_at TEXT COLLATE "C" NOT NULL, heartbeat_at TEXT COLLATE "C" NOT NULL, '
            "answer_json TEXT, outcome_json TEXT)"
        ),
        _index("input_rounds_replica", "input_rounds", ("replica", "state")),
        _index("input_rounds_heartbeat", "input_rounds", ("heartbeat_at",)),
    ),
}


def added_input_round_tables(present: set[str]) -> list[Statement]:
    """The statements creating the input-round table when it is not in ``present``."""
    return [s for table, ddl in INPUT_ROUND_TABLES.items() if table not in present for s in ddl]


# -- end of input rounds --------------------------------------------------------------------------

DDL: tuple[Statement, ...] = (
    sql.SQL('CREATE TABLE meta (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL)'),
    # seq is assigned by the writer (head + 1), never by a sequence: a gap then means a deleted
    # event, not a rolled-back insert.
    sql.SQL(
        "CREATE TABLE events (seq BIGINT PRIMARY KEY, at TEXT NOT NULL, "
        'kind TEXT COLLATE "C" NOT NULL, subject TEXT COLLATE "C" NOT NULL, payload TEXT NOT NULL, '
        "prev_hash TEXT NOT NULL, hash TEXT NOT NULL)"
    ),
    _index("events_subject", "events", ("subject", "seq")),
    sql.SQL(
        "CREATE TABLE head (id INTEGER PRIMARY KEY CHECK (id = 1), seq BIGINT NOT NULL, hash TEXT NOT NULL)"
    ),
    # Guard rails against casual edits with psql. They are not security: the owner of the
    # tables can drop them. Tamper-evidence comes from the hash chain.
    sql.SQL(
        "CREATE FUNCTION codemode_events_append_only() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'ledger events are append-only'; END $$"
    ),
    sql.SQL(
        "CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events "
        "FOR EACH ROW EXECUTE FUNCTION codemode_events_append_only()"
    ),
    sql.SQL(
        "CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events "
        "FOR EACH STATEMENT EXECUTE FUNCTION codemode_events_append_only()"
    ),
    _table("runs"),
    _table("calls"),
    _table("approvals"),
    _table("mcp_sessions"),
    _table("plans"),
    _table("skills"),
    _table("workspaces"),
    _table("approval_tickets"),
    _table("sandbox_sessions"),
    _index("calls_run", "calls", ("run_id", "created_at")),
    _index("calls_state", "calls", ("state",)),
    sql.SQL('CREATE INDEX calls_receipt ON calls ("receipt") WHERE "receipt" IS NOT NULL'),
    # "Newest calls first, LIMIT n" without sorting the whole table (SQLite gets it from rowid).
    _index("calls_order", "calls", ("created_at", INSERT_ORDER)),
    # One attempt number per key, and at most one row holding a key at any time. reserve()
    # checks both under the writers' advisory lock; the indexes make a bug there fail loudly
    # instead of executing twice.
    sql.SQL(
        'CREATE UNIQUE INDEX calls_key_attempt ON calls ("idem_key", "attempt") '
        'WHERE "idem_key" IS NOT NULL AND "attempt" IS NOT NULL'
    ),
    sql.SQL(
        'CREATE UNIQUE INDEX calls_key_holder ON calls ("idem_key") '
        'WHERE "idem_key" IS NOT NULL AND "state" IN ({})'
    ).format(_HOLDING),
    _index("runs_started", "runs", ("started_at",)),
    *_COLUMN_INDEXES.values(),
    *added_quota_tables(set()),
    *added_input_round_tables(set()),
)


def added_columns(table: Table, present: set[str]) -> list[Statement]:
    """``ALTER TABLE`` statements for the columns of :data:`ADDED_COLUMNS` that ``table`` lacks.

    Checked against the catalog first rather than with ``ADD COLUMN IF NOT EXISTS``, which
    takes the table's exclusive lock on every open even when there is nothing to add."""
    statements: list[Statement] = []
    for name in ADDED_COLUMNS.get(table, ()):
        if name not in present:
            column = _column(name, COLUMNS[table][name])
            statements.append(sql.SQL("ALTER TABLE {} ADD COLUMN {}").format(sql.Identifier(table), column))
            statements += [_COLUMN_INDEXES[name]] if name in _COLUMN_INDEXES else []
    return statements


def added_tables(present: set[str]) -> list[Statement]:
    """``CREATE TABLE`` statements for the tables of :data:`ADDED_TABLES` not in ``present``."""
    return [_table(table) for table in ADDED_TABLES if table not in present]
