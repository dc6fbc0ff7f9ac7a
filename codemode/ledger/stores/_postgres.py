"""The PostgreSQL store: one ledger in one database (in its current schema), shared by every
broker that connects to it. Imported only when a ``postgresql://`` ledger is opened, so the core
install does not need psycopg.

Concurrency model:

* Every write transaction first takes a transaction-level advisory lock
  (``pg_advisory_xact_lock``) on one key per ledger. Every writer on every host takes it, so
  "read the key's rows, decide, write" is atomic everywhere, as ``BEGIN IMMEDIATE`` makes it
  for SQLite on one machine. Write transactions run READ COMMITTED: each statement after the
  lock sees everything committed before the lock was granted (a REPEATABLE READ snapshot would
  date from the lock request, before the previous writer's commit). The lock ends with the
  transaction, so a client that dies (its connection with it) cannot leave it held;
  ``lock_timeout`` bounds the wait.
* Read transactions are REPEATABLE READ READ ONLY: one snapshot for all their queries, and they
  never wait for writers.
* One connection per store object, guarded by a lock, as for SQLite. A connection that breaks
  during a transaction fails it with :class:`StoreError`, and the next transaction connects
  again. A transaction is never replayed on the new connection (its decisions rested on what
  it had read); only one that could not even start (the connection died while idle: a server
  restart, an idle timeout) is started again, since nothing was read or decided yet.
* Durability: a commit returns once its WAL is flushed. ``synchronous_commit = off`` on the
  server is raised to ``on`` for our sessions (stronger settings such as ``remote_apply`` are
  kept). ``durable=False`` turns it off for that commit only: a crash of the server may lose it
  (never corrupts anything), and the next durable commit covers it. ``synchronous="normal"``
  does that for every commit, like SQLite's ``synchronous=NORMAL``.

Values are TEXT (compared byte by byte) and BIGINT in a UTF8 database. PostgreSQL text cannot
hold the NUL character: such a value fails its transaction with :class:`StoreError` instead of
being stored altered.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import threading
import uuid
from collections.abc import Callable, Generator
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from codemode.errors import LedgerError, NoLedgerError
from codemode.ledger._chain import genesis_hash
from codemode.ledger._schema import ADDED_COLUMNS, ADDED_TABLES, SCHEMA_VERSION
from codemode.ledger.stores._commit_signal import CommitSignal
from codemode.ledger.stores._postgres_ddl import (
    DDL,
    INPUT_ROUND_TABLES,
    QUOTA_TABLES,
    added_columns,
    added_input_round_tables,
    added_quota_tables,
    added_tables,
)
from codemode.ledger.stores._postgres_tx import Connection, PostgresTransaction
from codemode.ledger.stores._protocol import StoreError, Synchronous


def public_location(conninfo: str) -> str:
    """``postgresql://user@host:port/dbname`` for messages: never the password or other options."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        # Not chained and not quoted: the parser's message may echo a piece of the password.
        raise LedgerError(
            "the ledger's PostgreSQL connection string is malformed (not shown: it may hold a password)"
        ) from None

    def part(name: str) -> str:
        value = params.get(name)
        return "" if value is None else str(value)

    user, host, port = part("user"), part("host") or part("hostaddr"), part("port")
    where = (f"{quote(user, safe='')}@" if user else "") + quote(host, safe=",")
    return f"postgresql://{where}{f':{port}' if port else ''}/{quote(part('dbname'), safe='')}"


def _lock_key(schema: str) -> int:
    # One writers' lock per ledger: advisory locks are per database, and two ledgers in two
    # schemas of one database need not queue behind each other.
    digest = hashlib.blake2b(f"codemode ledger writers: {schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresStore:
    """:class:`._protocol.LedgerStore` on a PostgreSQL database.

    Open it with :meth:`open`. Thread-safe; safe across processes and hosts sharing the database.
    """

    def __init__(
        self,
        conninfo: str,
        location: str,
        *,
        lock_timeout_s: float,
        connect_timeout_s: float,
        synchronous: Synchronous,
    ) -> None:
        """Connect (psycopg errors propagate); :meth:`open` also checks or creates the schema."""
        self._conninfo = conninfo
        self._location = location
        self._lock_timeout_s = lock_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._synchronous: Synchronous = synchronous
        self._lock = threading.RLock()
        self._closed = False
        self._in_transaction = False
        self._commit_signal = CommitSignal()
        self._conn = self._connect()
        try:
            found = self._conn.execute("SELECT current_schema()").fetchone()
        except BaseException:
            self._conn.close()
            raise
        self._schema = None if found is None or found[0] is None else str(found[0])
        self._lock_key = _lock_key(self._schema or "")

    @classmethod
    def open(
        cls,
        conninfo: str,
        *,
        create: bool = True,
        lock_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        synchronous: Synchronous = "full",
        created_at: Callable[[], str] | None = None,
    ) -> PostgresStore:
        """Connect to the database at ``conninfo`` (a ``postgresql://`` URL or ``key=value``
        string) and, with ``create``, create the ledger's tables in its current schema.

        ``lock_timeout_s`` bounds the wait for the writers' lock; ``created_at`` gives the
        creation time recorded in a new store's metadata.
        """
        location = public_location(conninfo)
        try:
            store = cls(
                conninfo,
                location,
                lock_timeout_s=lock_timeout_s,
                connect_timeout_s=connect_timeout_s,
                synchronous=synchronous,
            )
        except psycopg.Error as exc:
            raise LedgerError(f"cannot open ledger {location}: {exc}") from exc
        try:
            store._init_schema(create, created_at)
        except BaseException:
            store.close()
            raise
        return store

    @property
    def location(self) -> str:
        return self._location

    def setting(self, name: str) -> str:
        """The value of a server setting on this store's connection (for diagnostics and tests)."""
        with self._lock:
            if self._closed:
                raise StoreError(f"ledger {self._location} is closed")
            try:
                found = self._conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
            except psycopg.Error as exc:
                raise self._fail(f"reading the setting {name}", exc) from exc
            return "" if found is None else str(found[0])

    def _connect(self) -> Connection:
        given = conninfo_to_dict(self._conninfo)
        options: dict[str, Any] = {
            "client_encoding": "UTF8",  # str in, the same str out, whatever PGCLIENTENCODING says
            "fallback_application_name": "codemode-ledger",
        }
        if "connect_timeout" not in given:  # libpq's default is to wait for the OS to give up
            options["connect_timeout"] = max(2, math.ceil(self._connect_timeout_s))
        conn = psycopg.connect(self._conninfo, autocommit=True, **options)
        try:
            encoding = conn.info.parameter_status("server_encoding")
            if encoding != "UTF8":
                raise LedgerError(
                    f"ledger {self._location}: the database's encoding is {encoding}; "
                    "a ledger needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')"
                )
            found = conn.execute("SHOW synchronous_commit").fetchone()
            settings = {"lock_timeout": f"{max(1, round(self._lock_timeout_s * 1000))}ms"}
            if self._synchronous == "normal":
                settings["synchronous_commit"] = "off"
            elif found is not None and found[0] == "off":
                settings["synchronous_commit"] = "on"
            for name, value in settings.items():
                conn.execute("SELECT set_config(%s, %s, false)", (name, value))
        except BaseException:
            conn.close()
            raise
        return conn

    def _fail(self, action: str, exc: BaseException) -> StoreError:
        if isinstance(exc, errors.LockNotAvailable):
            return StoreError(
                f"ledger {self._location}: another writer held the ledger's lock for more than "
                f"{self._lock_timeout_s:g} s"
            )
        return StoreError(f"ledger {self._location}: {action} failed: {exc}")

    def _connection(self) -> Connection:
        if self._conn.closed:  # broken: we close it only in close()
            try:
                self._conn = self._connect()
            except psycopg.Error as exc:
                raise self._fail("reconnecting", exc) from exc
        return self._conn

    def _begin(self, write: bool, durable: bool) -> Connection:
        conn = self._connection()
        try:
            self._start(conn, write, durable)
            return conn
        except psycopg.Error as exc:
            self._rollback(conn)
            if not conn.broken:
                raise self._fail("starting a transaction", exc) from exc
        # The connection died while idle: nothing was read or decided, so start on a new one.
        conn = self._connection()
        try:
            self._start(conn, write, durable)
        except psycopg.Error as exc:
            self._rollback(conn)
            raise self._fail("starting a transaction", exc) from exc
        return conn

    def _start(self, conn: Connection, write: bool, durable: bool) -> None:
        if not write:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return
        conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
        if not durable:  # this commit only (see the module docstring)
            conn.execute("SET LOCAL synchronous_commit = off")

    @staticmethod
    def _rollback(conn: Connection) -> None:
        if conn.closed or conn.info.transaction_status == TransactionStatus.IDLE:
            return
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")

    @contextlib.contextmanager
    def transaction(self, *, write: bool, durable: bool = True) -> Generator[PostgresTransaction]:
        with self._lock:
            if self._closed:
                raise StoreError(f"ledger {self._location} is closed")
            if self._in_transaction:
                # PostgreSQL would only warn about a second BEGIN, and the inner COMMIT would
                # then commit the outer transaction early: refuse, as SQLite does.
                raise StoreError(f"ledger {self._location}: a transaction is already open on this thread")
            self._in_transaction = True
            try:
                conn = self._begin(write, durable)
                try:
                    yield PostgresTransaction(conn, self._location)
                except BaseException as exc:
                    self._rollback(conn)
                    if isinstance(exc, psycopg.Error):
                        raise self._fail("a ledger operation", exc) from exc
                    raise
                try:
                    conn.execute("COMMIT")
                except psycopg.Error as exc:
                    # A lost connection here leaves it unknown whether the commit happened.
                    self._rollback(conn)
                    raise self._fail("commit", exc) from exc
            finally:
                self._in_transaction = False
        if write:
            self._commit_signal.committed()

    def commits(self) -> int:
        return self._commit_signal.count()

    def wait_for_commit(self, seen: int, timeout_s: float) -> None:
        # Commits of other clients do not wake it (no LISTEN/NOTIFY): callers poll, as the
        # Protocol allows.
        self._commit_signal.wait(seen, timeout_s)

    def _init_schema(self, create: bool, created_at: Callable[[], str] | None) -> None:
        if self._schema is None:
            raise LedgerError(
                f"ledger {self._location}: no schema to keep it in (the search_path names no existing schema)"
            )
        # Under the writers' lock: two processes creating the ledger at once queue here, and the
        # second finds the first one's tables.
        with self.transaction(write=True) as tx:
            has = {
                str(r["tablename"])
                for r in tx.fetch(
                    sql.SQL(
                        "SELECT tablename FROM pg_tables "
                        "WHERE schemaname = current_schema() AND tablename IN ('meta', 'events')"
                    )
                )
            }
            meta: dict[str, str] = {}
            if "meta" in has:
                meta = {
                    str(r["key"]): str(r["value"]) for r in tx.fetch(sql.SQL("SELECT key, value FROM meta"))
                }
            if "schema_version" not in meta:
                if "events" in has:
                    # Re-creating meta would mint a new ledger id and orphan the whole chain.
                    raise LedgerError(
                        f"ledger {self._location} has events but no schema metadata: it is damaged "
                        "or was tampered with; keep the database for inspection and start a new ledger"
                    )
                if not create:
                    raise NoLedgerError(
                        f"no ledger in {self._location} (schema {self._schema}): it is created by the "
                        "first run that makes a call"
                    )
                self._create_schema(tx, created_at)
            elif meta["schema_version"] != str(SCHEMA_VERSION):
                raise LedgerError(
                    f"ledger {self._location} has schema version {meta['schema_version']}; this codemode "
                    f"reads version {SCHEMA_VERSION}. Use the codemode version that wrote it."
                )
            else:
                self._add_columns(tx)
                self._add_tables(tx)

    def _add_tables(self, tx: PostgresTransaction) -> None:
        present = {
            str(r["tablename"])
            for r in tx.fetch(
                sql.SQL(
                    "SELECT tablename FROM pg_tables "
                    "WHERE schemaname = current_schema() AND tablename = ANY(%s)"
                ),
                ([*ADDED_TABLES, *QUOTA_TABLES, *INPUT_ROUND_TABLES],),
            )
        }
        added = [*added_tables(present), *added_quota_tables(present), *added_input_round_tables(present)]
        for statement in added:
            tx.fetch(statement)

    def _add_columns(self, tx: PostgresTransaction) -> None:
        for table in ADDED_COLUMNS:
            present = {
                str(r["column_name"])
                for r in tx.fetch(
                    sql.SQL(
                        "SELECT column_name FROM information_schema.columns "
                        "WHERE table_schema = current_schema() AND table_name = %s"
                    ),
                    (table,),
                )
            }
            for statement in added_columns(table, present):
                tx.fetch(statement)

    def _create_schema(self, tx: PostgresTransaction, created_at: Callable[[], str] | None) -> None:
        try:
            for statement in DDL:
                tx.fetch(statement)
        except StoreError as exc:
            raise LedgerError(
                f"cannot create the ledger's tables in {self._location} (schema {self._schema}): "
                f"{exc.__cause__}"
            ) from exc
        ledger_id = uuid.uuid4().hex
        meta = {"schema_version": str(SCHEMA_VERSION), "ledger_id": ledger_id}
        if created_at is not None:
            meta["created_at"] = created_at()
        for item in meta.items():
            tx.fetch(sql.SQL("INSERT INTO meta (key, value) VALUES (%s, %s)"), item)
        tx.fetch(sql.SQL("INSERT INTO head (id, seq, hash) VALUES (1, 0, %s)"), (genesis_hash(ledger_id),))

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(psycopg.Error):
                    self._conn.close()
        # Wake waiters: their next transaction reports the store closed.
        self._commit_signal.wake()
