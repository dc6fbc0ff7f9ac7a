"""The SQLite store: one file in WAL mode, private to its owner.

Concurrency model:

* Every write is one ``BEGIN IMMEDIATE`` transaction. SQLite lets one writer at a time hold
  that lock across *all* processes using the file, so "read the key's rows, decide, write"
  is atomic across threads and processes alike; the busy timeout makes the others wait.
  Writers queue on an ``flock`` first (:mod:`._sqlite_gate`) for a better tail latency.
* One connection per store object, guarded by a lock. Writes serialise in SQLite anyway,
  and the calls are short; the broker runs them in worker threads (``anyio.to_thread``).
* ``synchronous=FULL``: a commit is on disk before the transaction ends, so a request is never
  sent before its record could survive a power cut. ``durable=False`` skips the fsync of one
  commit (only for calls without side effects): it survives any crash of the process but not
  necessarily a power cut, and the next fsync'd commit makes it durable.

The file, its ``-wal``/``-shm`` and the lock file are created ``0600`` and tightened to that
when an older codemode left them readable by others: arguments and results are redacted before
they are stored, but who called what, when, is nobody else's business either.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from codemode.errors import LedgerError, NoLedgerError
from codemode.ledger._chain import genesis_hash
from codemode.ledger._reduce import Row
from codemode.ledger._schema import ADDED_COLUMNS, COLUMNS, PRIMARY_KEY, SCHEMA_VERSION, Table
from codemode.ledger.stores._commit_signal import CommitSignal
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
    Synchronous,
)
from codemode.ledger.stores._sqlite_ddl import (
    APPEND_ONLY_DELETE,
    DDL,
    INPUT_ROUND_DDL,
    QUOTA_DDL,
    added_columns,
    added_tables,
)
from codemode.ledger.stores._sqlite_gate import WriterGate

MEMORY = ":memory:"
_ROUND = ", ".join(INPUT_ROUND_COLUMNS)
_PRIVATE_MODE = 0o600
_SIDECARS = ("-wal", "-shm", ".lock")

# Table and column names in the SQL below come from _schema constants, never from input.
_SELECT_ROW = {
    table: f"SELECT {', '.join(cols)} FROM {table} WHERE {PRIMARY_KEY[table]} = ?"  # noqa: S608
    for table, cols in COLUMNS.items()
}
_SELECT_ALL = {table: f"SELECT {', '.join(cols)} FROM {table}" for table, cols in COLUMNS.items()}  # noqa: S608
_INSERT = {
    table: f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"  # noqa: S608
    for table, cols in COLUMNS.items()
}
_CALL_COLUMNS = ", ".join(COLUMNS["calls"])
_COMPARISONS = frozenset({"=", ">=", "<="})
"""The comparisons a :class:`RunQuery` uses besides ``in`` (anything else is a bug: refused)."""


def _run_conditions(query: RunQuery) -> tuple[list[str], list[Any]]:
    """``query``'s conditions as SQL terms to join with AND, and their parameters in order.

    Column names and operators come from :meth:`RunQuery.conditions`, never from the caller's
    values; every value is a ``?`` parameter. An empty ``in`` matches no row (never every row)."""
    terms: list[str] = []
    params: list[Any] = []
    for column, operator, value in query.conditions():
        if column not in COLUMNS["runs"]:
            raise ValueError(f"runs have no column {column!r}")
        if operator == "in" and isinstance(value, tuple):
            terms.append(f"{column} IN ({', '.join('?' for _ in value)})" if value else "0 = 1")
            params.extend(value)
        elif operator in _COMPARISONS and isinstance(value, str):
            terms.append(f"{column} {operator} ?")
            params.append(value)
        else:
            raise ValueError(f"cannot compare runs by {column} {operator} {value!r}")
    return terms, params


def tighten(path: Path) -> None:
    """Make ``path`` readable and writable by its owner only, if it exists and is looser."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            os.chmod(path, mode & 0o700)
    except FileNotFoundError:
        return
    except PermissionError:
        # Someone else's file (a ledger shared on purpose): theirs to set; we can still use it.
        return


def _create_private(path: Path) -> None:
    """Create the (empty) database file 0600 before SQLite does, with the process umask's 0644."""
    with contextlib.suppress(FileExistsError):  # another process created it meanwhile: fine
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _PRIVATE_MODE))


def _connect(location: str, busy_timeout_s: float, synchronous: Synchronous) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves. check_same_thread is
    # off because the broker calls from whichever worker thread anyio picks; all use of the
    # connection is serialised by the store's lock.
    conn = sqlite3.connect(location, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        if location != MEMORY:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise LedgerError(f"ledger {location}: could not switch to WAL mode (got {mode})")
        conn.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'full' else 'NORMAL'}")
    except BaseException:
        conn.close()
        raise
    return conn


class SqliteTransaction:
    """:class:`._protocol.StoreTransaction` on one SQLite connection."""

    def __init__(self, conn: sqlite3.Connection, location: str) -> None:
        self._conn = conn
        self._location = location
        self.appended: tuple[int, str] | None = None

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.Error as exc:
            raise StoreError(f"ledger {self._location}: a ledger operation failed: {exc}") from exc

    def _one(self, sql: str, params: Any = ()) -> Row | None:
        found = self.execute(sql, params).fetchone()
        return None if found is None else dict(found)

    def _all(self, sql: str, params: Any = ()) -> list[Row]:
        cursor = self.execute(sql, params)
        try:
            return [dict(r) for r in cursor.fetchall()]
        except sqlite3.Error as exc:
            raise StoreError(f"ledger {self._location}: a ledger operation failed: {exc}") from exc

    def ledger_id(self) -> str | None:
        found = self.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchone()
        return None if found is None else str(found[0])

    def head(self) -> tuple[int, str] | None:
        found = self.execute("SELECT seq, hash FROM head WHERE id = 1").fetchone()
        return None if found is None else (int(found[0]), str(found[1]))

    def last_event(self) -> tuple[int, str] | None:
        found = self.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        return None if found is None else (int(found[0]), str(found[1]))

    def append(self, event: EventRow) -> None:
        self.execute(
            "INSERT INTO events (seq, at, kind, subject, payload, prev_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (event.seq, event.at, event.kind, event.subject, event.payload, event.prev_hash, event.hash),
        )
        self.execute("UPDATE head SET seq = ?, hash = ? WHERE id = 1", (event.seq, event.hash))
        self.appended = (event.seq, event.hash)

    def events(self, *, subject: str | None = None, limit: int | None = None) -> Iterator[EventRow]:
        sql = "SELECT seq, at, kind, subject, payload, prev_hash, hash FROM events"
        params: list[Any] = []
        if subject is not None:
            sql += " WHERE subject = ?"
            params.append(subject)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        cursor = self.execute(sql, params)
        try:
            for seq, at, kind, subj, payload, prev_hash, digest in cursor:
                yield EventRow(
                    seq=seq,
                    at=str(at),
                    kind=str(kind),
                    subject=str(subj),
                    payload=str(payload),
                    prev_hash=str(prev_hash),
                    hash=str(digest),
                )
        except sqlite3.Error as exc:
            raise StoreError(f"ledger {self._location}: reading the events failed: {exc}") from exc

    def event_hash(self, seq: int) -> str | None:
        found = self.execute("SELECT hash FROM events WHERE seq = ?", (seq,)).fetchone()
        return None if found is None else str(found[0])

    def archived(self) -> tuple[int, str] | None:
        found = dict(
            self.execute("SELECT key, value FROM meta WHERE key IN ('archived_seq', 'archived_hash')")
        )
        if "archived_seq" not in found or "archived_hash" not in found:
            return None
        return int(found["archived_seq"]), str(found["archived_hash"])

    def drop_archived(self, through: tuple[int, str]) -> None:
        # DDL is transactional in SQLite: a failure or crash before COMMIT leaves the guard in place.
        self.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
        self.execute("DELETE FROM events WHERE seq <= ?", (through[0],))
        self.execute(APPEND_ONLY_DELETE)
        for key, value in (("archived_seq", str(through[0])), ("archived_hash", through[1])):
            self.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def row(self, table: Table, key: str) -> Row | None:
        return self._one(_SELECT_ROW[table], (key,))

    def insert(self, table: Table, row: Row) -> None:
        self.execute(_INSERT[table], [row[c] for c in COLUMNS[table]])

    def update(self, table: Table, key: str, fields: Mapping[str, str | int | None]) -> None:
        names = list(fields)
        for name in names:  # the reducer checked them already; a store does not trust its caller
            if name not in COLUMNS[table]:
                raise StoreError(f"ledger {self._location}: no column {table}.{name}")
        assignments = ", ".join(f"{n} = ?" for n in names)
        sql = f"UPDATE {table} SET {assignments} WHERE {PRIMARY_KEY[table]} = ?"  # noqa: S608
        self.execute(sql, [*(fields[n] for n in names), key])

    def rows(self, table: Table) -> Iterator[Row]:
        cursor = self.execute(_SELECT_ALL[table])
        try:
            yield from (dict(r) for r in cursor)
        except sqlite3.Error as exc:
            raise StoreError(f"ledger {self._location}: reading {table} failed: {exc}") from exc

    def key_attempt(self, idem_key: str, *, latest: bool) -> Row | None:
        if latest:
            return self._one(
                f"SELECT {_CALL_COLUMNS} FROM calls WHERE idem_key = ? AND attempt IS NOT NULL "  # noqa: S608
                "ORDER BY attempt DESC LIMIT 1",
                (idem_key,),
            )
        return self._one(f"SELECT {_CALL_COLUMNS} FROM calls WHERE idem_key = ? AND attempt = 1", (idem_key,))  # noqa: S608

    def calls(self, query: CallQuery) -> list[Row]:
        where: list[str] = []
        params: list[Any] = []
        if query.run_id is not None:
            where.append("run_id = ?")
            params.append(query.run_id)
        if query.states is not None:
            where.append(f"state IN ({', '.join('?' for _ in query.states)})")
            params.extend(sorted(query.states))
        if query.receipt is not None:
            where.append("receipt = ?")
            params.append(query.receipt)
        if query.server is not None:
            where.append("server = ?")
            params.append(query.server)
        if query.with_receipt:
            where.append("receipt IS NOT NULL AND receipt <> ''")
        if query.compensates is not None:
            where.append(f"compensates IN ({', '.join('?' for _ in query.compensates)})")
            params.extend(sorted(query.compensates))
        order = "DESC" if query.newest_first else "ASC"
        sql = f"SELECT {_CALL_COLUMNS} FROM calls"  # noqa: S608
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY created_at {order}, rowid {order}"
        if query.limit is not None:
            sql += " LIMIT ?"
            params.append(query.limit)
        return self._all(sql, params)

    def runs(self, query: RunQuery) -> list[Row]:
        sql = f"SELECT {', '.join(COLUMNS['runs'])} FROM runs"  # noqa: S608
        terms, params = _run_conditions(query)
        if terms:
            sql += " WHERE " + " AND ".join(terms)
        sql += " ORDER BY started_at DESC, run_id DESC"
        if query.limit is not None:
            sql += " LIMIT ?"
            params.append(query.limit)
        return self._all(sql, params)

    def run_values(
        self, column: RunFacet, tenant: str | None = None, *, tenants: tuple[str, ...] | None = None
    ) -> list[str]:
        if column not in RUN_FACETS:
            raise ValueError(f"runs cannot be listed by {column!r}")
        # The column name is one of RUN_FACETS (checked above); the tenants are parameters.
        sql = f"SELECT DISTINCT {column} AS value FROM runs"  # noqa: S608
        terms, params = _run_conditions(RunQuery(tenant=tenant, tenants=tenants))
        if terms:
            sql += " WHERE " + " AND ".join(terms)
        return [str(row["value"]) for row in self._all(sql + " ORDER BY value", params)]

    def approvals(self, query: ApprovalQuery) -> list[Row]:
        return self._all(
            f"SELECT {', '.join(COLUMNS['approvals'])} FROM approvals "  # noqa: S608
            "WHERE used_at IS NULL AND call_id IS NULL "
            "AND tenant = ? AND principal = ? AND server = ? AND tool = ? AND args_digest = ? "
            "AND expires_at > ? ORDER BY issued_at, rowid",
            (query.tenant, query.principal, query.server, query.tool, query.args_digest, query.usable_at),
        )

    # -- quotas (issue 42) ----------------------------------------------------------------------

    def quota_usage(self, keys: Sequence[str]) -> dict[str, tuple[str, int]]:
        if not keys:
            return {}
        marks = ", ".join("?" for _ in keys)
        query = f"SELECT key, window_start, used FROM quota_usage WHERE key IN ({marks})"  # noqa: S608
        rows = self._all(query, list(keys))
        return {str(r["key"]): (str(r["window_start"]), int(cast(int, r["used"]))) for r in rows}

    def set_quota_usage(self, key: str, window_start: str, used: int) -> None:
        self.execute(
            "INSERT INTO quota_usage (key, window_start, used) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET window_start = excluded.window_start, used = excluded.used",
            (key, window_start, used),
        )

    def quota_slots(self, principal: str, tenant: str) -> list[Row]:
        return self._all(
            "SELECT run_id, principal, tenant, owner, expires_at FROM quota_slots "
            "WHERE principal = ? OR tenant = ?",
            (principal, tenant),
        )

    def hold_quota_slot(self, slot: Mapping[str, str]) -> None:
        self.execute(
            "INSERT INTO quota_slots (run_id, principal, tenant, owner, expires_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id) DO UPDATE SET expires_at = excluded.expires_at",
            [slot[c] for c in QUOTA_SLOT_COLUMNS],
        )

    def drop_quota_slots(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            marks = ", ".join("?" for _ in run_ids)
            self.execute(f"DELETE FROM quota_slots WHERE run_id IN ({marks})", list(run_ids))  # noqa: S608

    # -- end of quotas ----------------------------------------------------------------------------

    # -- input rounds (issue 42) ----------------------------------------------------------------

    def input_round(self, key: str) -> Row | None:
        found = self._all(f"SELECT {_ROUND} FROM input_rounds WHERE round_key = ?", (key,))  # noqa: S608
        return found[0] if found else None

    def input_rounds(self, replica: str, state: str) -> list[Row]:
        query = f"SELECT {_ROUND} FROM input_rounds WHERE replica = ? AND state = ?"  # noqa: S608
        return self._all(query, (replica, state))

    def save_input_round(self, row: Mapping[str, str | None]) -> None:
        marks = ", ".join("?" for _ in INPUT_ROUND_COLUMNS)
        self.execute(
            f"INSERT OR REPLACE INTO input_rounds ({_ROUND}) VALUES ({marks})",  # noqa: S608
            [row[c] for c in INPUT_ROUND_COLUMNS],
        )

    def touch_input_rounds(self, keys: Sequence[str], at: str) -> None:
        if keys:
            marks = ", ".join("?" for _ in keys)
            query = f"UPDATE input_rounds SET heartbeat_at = ? WHERE round_key IN ({marks})"  # noqa: S608
            self.execute(query, [at, *keys])

    def drop_input_rounds(self, before: str) -> int:
        return self.execute("DELETE FROM input_rounds WHERE heartbeat_at < ?", (before,)).rowcount

    # -- end of input rounds --------------------------------------------------------------------

    def integrity_problems(self) -> list[str]:
        quick = [str(r[0]) for r in self.execute("PRAGMA quick_check").fetchall()]
        return [] if quick == ["ok"] else ["SQLite integrity check: " + "; ".join(quick[:5])]


class SqliteStore:
    """:class:`._protocol.LedgerStore` on one SQLite file (or ``:memory:``).

    Open it with :meth:`open`. Thread-safe; safe across processes sharing the file.
    """

    def __init__(
        self, conn: sqlite3.Connection, location: str, *, gate: WriterGate, synchronous: Synchronous
    ) -> None:
        self._conn = conn
        self._location = location
        self._gate = gate
        self._synchronous: Synchronous = synchronous
        self._lock = threading.RLock()
        self._closed = False
        self._commit_signal = CommitSignal()

    @classmethod
    def open(
        cls,
        path: Path | str,
        *,
        create: bool = True,
        busy_timeout_s: float = 30.0,
        synchronous: Synchronous = "full",
        created_at: Callable[[], str] | None = None,
    ) -> SqliteStore:
        """Open the file at ``path`` (``":memory:"`` for a private one), creating it with ``create``.

        ``created_at`` gives the creation time recorded in a new store's metadata.
        """
        location = str(path)
        file = None if location == MEMORY else Path(path)
        if file is not None:
            if not file.exists():
                if not create:
                    raise NoLedgerError(
                        f"no ledger at {file}: it is created by the first run that makes a call"
                    )
                try:
                    file.parent.mkdir(parents=True, exist_ok=True)
                    _create_private(file)
                except OSError as exc:
                    raise LedgerError(f"cannot create ledger {file}: {exc}") from exc
            for each in (file, *(Path(f"{location}{suffix}") for suffix in _SIDECARS)):
                tighten(each)
        gate = WriterGate(None if file is None else f"{location}.lock", busy_timeout_s)
        conn: sqlite3.Connection | None = None
        try:
            # Inside the gate: switching a new file to WAL can fail with "database is locked"
            # without waiting when several processes create the ledger at the same moment.
            with gate.held():
                conn = _connect(location, busy_timeout_s, synchronous)
            store = cls(conn, location, gate=gate, synchronous=synchronous)
            store._init_schema(created_at)
            if file is not None:  # SQLite gives -wal/-shm the file's mode; older ones may be looser
                for suffix in _SIDECARS:
                    tighten(Path(f"{location}{suffix}"))
        except BaseException as exc:
            if conn is not None:
                conn.close()
            gate.close()
            if isinstance(exc, sqlite3.Error):
                raise LedgerError(f"cannot open ledger {location}: {exc}") from exc
            raise
        return store

    @property
    def location(self) -> str:
        return self._location

    def pragma(self, name: str) -> object:
        """The value of ``PRAGMA name`` on this store's connection (for diagnostics and tests)."""
        if not name.replace("_", "").isalpha():
            raise ValueError(f"not a pragma name: {name!r}")
        with self._lock:
            return self._conn.execute(f"PRAGMA {name}").fetchone()[0]

    def _fail(self, action: str, exc: BaseException) -> StoreError:
        return StoreError(f"ledger {self._location}: {action} failed: {exc}")

    @contextlib.contextmanager
    def transaction(self, *, write: bool, durable: bool = True) -> Generator[SqliteTransaction]:
        gate = self._gate.held() if write else contextlib.nullcontext()
        relax = not durable and self._synchronous == "full"
        with self._lock, gate:
            if self._closed:
                raise StoreError(f"ledger {self._location} is closed")
            conn = self._conn
            try:
                if relax:  # this commit only: no fsync (see the module docstring)
                    conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                self._restore_synchronous(relax)
                raise self._fail("starting a transaction", exc) from exc
            try:
                yield SqliteTransaction(conn, self._location)
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                self._restore_synchronous(relax)
                if isinstance(exc, sqlite3.Error):
                    raise self._fail("a ledger operation", exc) from exc
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise self._fail("commit", exc) from exc
            finally:
                self._restore_synchronous(relax)
        if write:
            self._commit_signal.committed()

    def _restore_synchronous(self, relaxed: bool) -> None:
        if relaxed:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("PRAGMA synchronous = FULL")

    def commits(self) -> int:
        return self._commit_signal.count()

    def wait_for_commit(self, seen: int, timeout_s: float) -> None:
        self._commit_signal.wait(seen, timeout_s)

    def _init_schema(self, created_at: Callable[[], str] | None) -> None:
        with self.transaction(write=True) as tx:
            has = {
                str(r[0])
                for r in tx.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'events')"
                )
            }
            meta: dict[str, str] = {}
            if "meta" in has:
                meta = {str(r["key"]): str(r["value"]) for r in tx.execute("SELECT key, value FROM meta")}
            if "schema_version" not in meta:
                if "events" in has:
                    # Re-creating meta would mint a new ledger id and orphan the whole chain.
                    raise LedgerError(
                        f"ledger {self._location} has events but no schema metadata: it is damaged "
                        "or was tampered with; keep the file for inspection and start a new ledger"
                    )
                for statement in DDL:
                    tx.execute(statement)
                ledger_id = uuid.uuid4().hex
                meta = {"schema_version": str(SCHEMA_VERSION), "ledger_id": ledger_id}
                if created_at is not None:
                    meta["created_at"] = created_at()
                for item in meta.items():
                    tx.execute("INSERT INTO meta (key, value) VALUES (?, ?)", item)
                tx.execute("INSERT INTO head (id, seq, hash) VALUES (1, 0, ?)", (genesis_hash(ledger_id),))
            elif meta["schema_version"] != str(SCHEMA_VERSION):
                raise LedgerError(
                    f"ledger {self._location} has schema version {meta['schema_version']}; this codemode "
                    f"reads version {SCHEMA_VERSION}. Use the codemode version that wrote it."
                )
            else:
                for table in ADDED_COLUMNS:
                    present = {str(r["name"]) for r in tx.execute(f"PRAGMA table_info({table})")}
                    for statement in added_columns(table, present):
                        tx.execute(statement)
                for statement in added_tables():
                    tx.execute(statement)
                for statement in (*QUOTA_DDL, *INPUT_ROUND_DDL):  # quotas, input rounds (issue 42)
                    tx.execute(statement)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                self._gate.close()
        # Wake waiters: their next transaction reports the store closed.
        self._commit_signal.wake()
