"""The storage primitives of :mod:`._postgres`: one transaction's reads and writes.

Every statement is literal SQL with quoted identifiers from :mod:`codemode.ledger._schema` and
bound values; every psycopg error becomes a :class:`StoreError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import psycopg
from psycopg import sql
from psycopg.abc import Params
from psycopg.rows import dict_row

from codemode.ledger._reduce import Row
from codemode.ledger._schema import COLUMNS, PRIMARY_KEY, Table
from codemode.ledger.stores._postgres_ddl import APPEND_ONLY_TRIGGERS, GUARD_INDEXES, INSERT_ORDER, Statement
from codemode.ledger.stores._protocol import (
    INPUT_ROUND_COLUMNS,
    QUOTA_SLOT_COLUMNS,
    RUN_FACETS,
    ApprovalQuery,
    CallQuery,
    EventRow,
    RunFacet,
    RunQuery,
    StoreError,
)

Connection = psycopg.Connection[tuple[Any, ...]]

_PAGE = 500
"""Rows per round trip when a transaction walks a whole table or the event log."""

_EVENT_COLUMNS = ("seq", "at", "kind", "subject", "payload", "prev_hash", "hash")


def _names(columns: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(c) for c in columns)


# Table and column names reach the SQL only as quoted identifiers from _schema constants.
_SELECT = {t: sql.SQL("SELECT {} FROM {}").format(_names(c), sql.Identifier(t)) for t, c in COLUMNS.items()}
_OPERATORS = {"=": sql.SQL("="), ">=": sql.SQL(">="), "<=": sql.SQL("<=")}
"""The comparisons a :class:`RunQuery` uses besides ``in``, as SQL (anything else is refused)."""
_SELECT_ROW = {
    t: sql.SQL("{} WHERE {} = %s").format(_SELECT[t], sql.Identifier(PRIMARY_KEY[t])) for t in COLUMNS
}
_INSERT = {
    t: sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(t), _names(c), sql.SQL(", ").join(sql.Placeholder() for _ in c)
    )
    for t, c in COLUMNS.items()
}
_SELECT_EVENTS = sql.SQL("SELECT {} FROM events").format(_names(_EVENT_COLUMNS))
_ROUND_SELECT = sql.SQL("SELECT {} FROM input_rounds").format(_names(INPUT_ROUND_COLUMNS))


def _where(statement: Statement, query: RunQuery) -> tuple[Statement, list[Any]]:
    """``statement`` with ``query``'s conditions as its WHERE clause, and their parameters.

    Column names are quoted identifiers and operators come from :data:`_OPERATORS`; every value
    is a parameter (``in``: one ``text[]`` array, ``= ANY``, which an empty array never matches)."""
    where: list[sql.Composable] = []
    params: list[Any] = []
    for column, operator, value in query.conditions():
        if operator == "in" and isinstance(value, tuple):
            where.append(sql.SQL("{} = ANY(%s::text[])").format(sql.Identifier(column)))
            params.append(list(value))
        elif operator in _OPERATORS and isinstance(value, str):
            where.append(sql.SQL("{} {} %s").format(sql.Identifier(column), _OPERATORS[operator]))
            params.append(value)
        else:
            raise ValueError(f"cannot compare runs by {column} {operator} {value!r}")
    if not where:
        return statement, params
    return sql.SQL("{} WHERE {}").format(statement, sql.SQL(" AND ").join(where)), params


class PostgresTransaction:
    """:class:`._protocol.StoreTransaction` on one PostgreSQL connection."""

    def __init__(self, conn: Connection, location: str) -> None:
        self._conn = conn
        self._location = location
        self.appended: tuple[int, str] | None = None

    def fetch(self, query: Statement, params: Params | None = None) -> list[Row]:
        """Run one statement; its rows as dicts (empty for statements that return none)."""
        try:
            with self._conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(query, params)
                return cast("list[Row]", cursor.fetchall()) if cursor.description else []
        except psycopg.Error as exc:
            raise StoreError(f"ledger {self._location}: a ledger operation failed: {exc}") from exc

    def _one(self, query: Statement, params: Params | None = None) -> Row | None:
        found = self.fetch(query, params)
        return found[0] if found else None

    def ledger_id(self) -> str | None:
        found = self._one(sql.SQL("SELECT value FROM meta WHERE key = 'ledger_id'"))
        return None if found is None else str(found["value"])

    def head(self) -> tuple[int, str] | None:
        found = self._one(sql.SQL("SELECT seq, hash FROM head WHERE id = 1"))
        return None if found is None else (cast(int, found["seq"]), str(found["hash"]))

    def last_event(self) -> tuple[int, str] | None:
        found = self._one(sql.SQL("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"))
        return None if found is None else (cast(int, found["seq"]), str(found["hash"]))

    def append(self, event: EventRow) -> None:
        self.fetch(
            sql.SQL("INSERT INTO events ({}) VALUES (%s, %s, %s, %s, %s, %s, %s)").format(
                _names(_EVENT_COLUMNS)
            ),
            (event.seq, event.at, event.kind, event.subject, event.payload, event.prev_hash, event.hash),
        )
        self.fetch(sql.SQL("UPDATE head SET seq = %s, hash = %s WHERE id = 1"), (event.seq, event.hash))
        self.appended = (event.seq, event.hash)

    def events(self, *, subject: str | None = None, limit: int | None = None) -> Iterator[EventRow]:
        # Page by seq instead of holding a server-side cursor: all pages come from the same
        # snapshot (or, in a write transaction, under the writers' lock), and a half-read
        # iterator leaves nothing open on the connection.
        after: int | None = None
        left = limit
        while left is None or left > 0:
            page = _PAGE if left is None else min(_PAGE, left)
            where: list[sql.Composable] = []
            params: list[Any] = []
            if subject is not None:
                where.append(sql.SQL("subject = %s"))
                params.append(subject)
            if after is not None:
                where.append(sql.SQL("seq > %s"))
                params.append(after)
            query = _SELECT_EVENTS
            if where:
                query = sql.SQL("{} WHERE {}").format(query, sql.SQL(" AND ").join(where))
            rows = self.fetch(sql.SQL("{} ORDER BY seq LIMIT %s").format(query), [*params, page])
            for row in rows:
                yield EventRow(
                    seq=cast(int, row["seq"]),
                    at=str(row["at"]),
                    kind=str(row["kind"]),
                    subject=str(row["subject"]),
                    payload=str(row["payload"]),
                    prev_hash=str(row["prev_hash"]),
                    hash=str(row["hash"]),
                )
            if len(rows) < page:
                return
            after = cast(int, rows[-1]["seq"])
            left = None if left is None else left - len(rows)

    def event_hash(self, seq: int) -> str | None:
        found = self._one(sql.SQL("SELECT hash FROM events WHERE seq = %s"), (seq,))
        return None if found is None else str(found["hash"])

    def archived(self) -> tuple[int, str] | None:
        rows = self.fetch(
            sql.SQL("SELECT key, value FROM meta WHERE key IN ('archived_seq', 'archived_hash')")
        )
        found = {str(r["key"]): str(r["value"]) for r in rows}
        if "archived_seq" not in found or "archived_hash" not in found:
            return None
        return int(found["archived_seq"]), found["archived_hash"]

    def drop_archived(self, through: tuple[int, str]) -> None:
        # Under the writers' lock and inside this transaction: the row trigger is off only for
        # this one DELETE (ALTER TABLE is transactional, and locks the table until commit).
        self.fetch(sql.SQL("ALTER TABLE events DISABLE TRIGGER events_append_only"))
        self.fetch(sql.SQL("DELETE FROM events WHERE seq <= %s"), (through[0],))
        self.fetch(sql.SQL("ALTER TABLE events ENABLE TRIGGER events_append_only"))
        for key, value in (("archived_seq", str(through[0])), ("archived_hash", through[1])):
            self.fetch(
                sql.SQL(
                    "INSERT INTO meta (key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ),
                (key, value),
            )

    def row(self, table: Table, key: str) -> Row | None:
        return self._one(_SELECT_ROW[table], (key,))

    def insert(self, table: Table, row: Row) -> None:
        self.fetch(_INSERT[table], [row[c] for c in COLUMNS[table]])

    def update(self, table: Table, key: str, fields: Mapping[str, str | int | None]) -> None:
        names = list(fields)
        for name in names:  # the reducer checked them already; a store does not trust its caller
            if name not in COLUMNS[table]:
                raise StoreError(f"ledger {self._location}: no column {table}.{name}")
        assignments = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(n)) for n in names)
        query = sql.SQL("UPDATE {} SET {} WHERE {} = %s").format(
            sql.Identifier(table), assignments, sql.Identifier(PRIMARY_KEY[table])
        )
        self.fetch(query, [*(fields[n] for n in names), key])

    def rows(self, table: Table) -> Iterator[Row]:
        key = sql.Identifier(PRIMARY_KEY[table])
        after: str | None = None
        while True:  # paged by primary key, for the reasons given in events()
            if after is None:
                rows = self.fetch(sql.SQL("{} ORDER BY {} LIMIT %s").format(_SELECT[table], key), (_PAGE,))
            else:
                query = sql.SQL("{} WHERE {} > %s ORDER BY {} LIMIT %s").format(_SELECT[table], key, key)
                rows = self.fetch(query, (after, _PAGE))
            yield from rows
            if len(rows) < _PAGE:
                return
            after = str(rows[-1][PRIMARY_KEY[table]])

    def key_attempt(self, idem_key: str, *, latest: bool) -> Row | None:
        if latest:
            query = sql.SQL("{} WHERE idem_key = %s AND attempt IS NOT NULL ORDER BY attempt DESC LIMIT 1")
        else:
            query = sql.SQL("{} WHERE idem_key = %s AND attempt = 1")
        return self._one(query.format(_SELECT["calls"]), (idem_key,))

    def calls(self, query: CallQuery) -> list[Row]:
        where: list[sql.Composable] = []
        params: list[Any] = []
        if query.run_id is not None:
            where.append(sql.SQL("run_id = %s"))
            params.append(query.run_id)
        if query.states is not None:
            where.append(sql.SQL("state = ANY(%s::text[])"))
            params.append(sorted(query.states))
        if query.receipt is not None:
            where.append(sql.SQL("receipt = %s"))
            params.append(query.receipt)
        if query.server is not None:
            where.append(sql.SQL("server = %s"))
            params.append(query.server)
        if query.with_receipt:
            where.append(sql.SQL("receipt IS NOT NULL AND receipt <> ''"))
        if query.compensates is not None:
            where.append(sql.SQL("compensates = ANY(%s::text[])"))
            params.append(sorted(query.compensates))
        statement = _SELECT["calls"]
        if where:
            statement = sql.SQL("{} WHERE {}").format(statement, sql.SQL(" AND ").join(where))
        order = sql.SQL("DESC" if query.newest_first else "ASC")
        statement = sql.SQL("{} ORDER BY created_at {}, {} {}").format(
            statement, order, sql.Identifier(INSERT_ORDER), order
        )
        if query.limit is not None:
            statement = sql.SQL("{} LIMIT %s").format(statement)
            params.append(query.limit)
        return self.fetch(statement, params)

    def runs(self, query: RunQuery) -> list[Row]:
        statement, params = _where(_SELECT["runs"], query)
        statement = sql.SQL("{} ORDER BY started_at DESC, run_id DESC").format(statement)
        if query.limit is not None:
            statement = sql.SQL("{} LIMIT %s").format(statement)
            params.append(query.limit)
        return self.fetch(statement, params)

    def run_values(
        self, column: RunFacet, tenant: str | None = None, *, tenants: tuple[str, ...] | None = None
    ) -> list[str]:
        if column not in RUN_FACETS:
            raise ValueError(f"runs cannot be listed by {column!r}")
        statement = sql.SQL("SELECT DISTINCT {} AS value FROM runs").format(sql.Identifier(column))
        statement, params = _where(statement, RunQuery(tenant=tenant, tenants=tenants))
        statement = sql.SQL("{} ORDER BY value").format(statement)
        return [str(row["value"]) for row in self.fetch(statement, params)]

    def approvals(self, query: ApprovalQuery) -> list[Row]:
        statement = sql.SQL(
            "{} WHERE used_at IS NULL AND call_id IS NULL "
            "AND tenant = %s AND principal = %s AND server = %s AND tool = %s AND args_digest = %s "
            "AND expires_at > %s ORDER BY issued_at, {}"
        ).format(_SELECT["approvals"], sql.Identifier(INSERT_ORDER))
        return self.fetch(
            statement,
            (query.tenant, query.principal, query.server, query.tool, query.args_digest, query.usable_at),
        )

    # -- quotas (issue 42) ----------------------------------------------------------------------

    def quota_usage(self, keys: Sequence[str]) -> dict[str, tuple[str, int]]:
        rows = self.fetch(
            sql.SQL("SELECT key, window_start, used FROM quota_usage WHERE key = ANY(%s::text[])"),
            (list(keys),),
        )
        return {str(r["key"]): (str(r["window_start"]), int(cast(int, r["used"]))) for r in rows}

    def set_quota_usage(self, key: str, window_start: str, used: int) -> None:
        self.fetch(
            sql.SQL(
                "INSERT INTO quota_usage (key, window_start, used) VALUES (%s, %s, %s) "
                "ON CONFLICT (key) DO UPDATE SET window_start = EXCLUDED.window_start, used = EXCLUDED.used"
            ),
            (key, window_start, used),
        )

    def quota_slots(self, principal: str, tenant: str) -> list[Row]:
        return self.fetch(
            sql.SQL(
                "SELECT run_id, principal, tenant, owner, expires_at FROM quota_slots "
                "WHERE principal = %s OR tenant = %s"
            ),
            (principal, tenant),
        )

    def hold_quota_slot(self, slot: Mapping[str, str]) -> None:
        self.fetch(
            sql.SQL(
                "INSERT INTO quota_slots (run_id, principal, tenant, owner, expires_at) "
                "VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (run_id) DO UPDATE SET expires_at = EXCLUDED.expires_at"
            ),
            [slot[c] for c in QUOTA_SLOT_COLUMNS],
        )

    def drop_quota_slots(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            self.fetch(sql.SQL("DELETE FROM quota_slots WHERE run_id = ANY(%s::text[])"), (list(run_ids),))

    # -- end of quotas ----------------------------------------------------------------------------

    # -- input rounds (issue 42) ----------------------------------------------------------------

    def input_round(self, key: str) -> Row | None:
        found = self.fetch(sql.SQL("{} WHERE round_key = %s").format(_ROUND_SELECT), (key,))
        return found[0] if found else None

    def input_rounds(self, replica: str, state: str) -> list[Row]:
        statement = sql.SQL("{} WHERE replica = %s AND state = %s").format(_ROUND_SELECT)
        return self.fetch(statement, (replica, state))

    def save_input_round(self, row: Mapping[str, str | None]) -> None:
        columns = [sql.Identifier(c) for c in INPUT_ROUND_COLUMNS]
        statement = sql.SQL(
            "INSERT INTO input_rounds ({}) VALUES ({}) ON CONFLICT (round_key) DO UPDATE SET ({}) = ({})"
        ).format(
            sql.SQL(", ").join(columns),
            sql.SQL(", ").join(sql.Placeholder() for _ in columns),
            sql.SQL(", ").join(columns[1:]),
            sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(c) for c in columns[1:]),
        )
        self.fetch(statement, [row[c] for c in INPUT_ROUND_COLUMNS])

    def touch_input_rounds(self, keys: Sequence[str], at: str) -> None:
        if keys:
            statement = sql.SQL("UPDATE input_rounds SET heartbeat_at = %s WHERE round_key = ANY(%s::text[])")
            self.fetch(statement, (at, list(keys)))

    def drop_input_rounds(self, before: str) -> int:
        statement = sql.SQL("DELETE FROM input_rounds WHERE heartbeat_at < %s RETURNING round_key")
        return len(self.fetch(statement, (before,)))

    # -- end of input rounds --------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        # PostgreSQL checks its own pages; what can go missing here is a guard rail (an index
        # or trigger dropped or disabled by hand), after which a bug could execute twice.
        indexes = self.fetch(
            sql.SQL(
                "SELECT c.relname AS name, i.indisunique AND i.indisvalid AND i.indisready AS ok "
                "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = ANY(%s::text[])"
            ),
            (list(GUARD_INDEXES),),
        )
        triggers = self.fetch(
            sql.SQL(
                "SELECT t.tgname AS name, t.tgenabled <> 'D' AS ok FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = 'events' AND NOT t.tgisinternal"
            )
        )
        working = {str(r["name"]) for r in indexes + triggers if r["ok"]}
        return [
            f"PostgreSQL guard rail {name} is missing, disabled or not unique"
            for name in (*GUARD_INDEXES, *APPEND_ONLY_TRIGGERS)
            if name not in working
        ]
