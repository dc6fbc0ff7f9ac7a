"""Where a batch job keeps its items and their states, so that it can be resumed.

The job store is the job's memory, not the record of side effects: the ledger decides whether a
call runs, replays or waits for reconcile (through the derived idempotency keys), so an item
state lost in a crash costs only a replay. Items are registered before anything runs (which is
how a duplicate key is refused up front, with memory independent of the input's size) and read
back in pages. SQLite here; :class:`JobStore` is what another store must provide.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import EllipsisType
from typing import Any, Literal, Protocol

ItemStatus = Literal["pending", "running", "done", "failed", "unknown", "unverified"]
FINAL_BAD: tuple[ItemStatus, ...] = ("failed", "unknown", "unverified")
SETTLED: tuple[ItemStatus, ...] = ("done", *FINAL_BAD)
PAGE = 500
_ITEM_COLUMNS = "key, line, data, status, attempts, run_id, result, error, calls, duration_ms"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    program_digest TEXT NOT NULL,
    inputs_digest TEXT,
    registered INTEGER NOT NULL DEFAULT 0,
    bad_lines TEXT NOT NULL DEFAULT '[]',
    principal TEXT,
    tenant TEXT,
    key_field TEXT
);
CREATE TABLE IF NOT EXISTS items (
    job_id TEXT NOT NULL,
    key TEXT NOT NULL,
    line INTEGER NOT NULL,
    data TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    run_id TEXT,
    result TEXT,
    error TEXT,
    calls INTEGER NOT NULL DEFAULT 0,
    duration_ms REAL NOT NULL DEFAULT 0,
    updated_at REAL,
    PRIMARY KEY (job_id, key)
);
CREATE INDEX IF NOT EXISTS items_by_line ON items (job_id, line);
"""
_ADDED_COLUMNS = {"principal": "TEXT", "tenant": "TEXT", "key_field": "TEXT"}
"""Columns newer than the first job stores: added to an older file when it is opened (NULL there)."""


class DuplicateKeyError(ValueError):
    def __init__(self, key: str, line: int, first_line: int) -> None:
        self.key, self.line, self.first_line = key, line, first_line
        super().__init__(f"duplicate key {key!r} at line {line} (first at line {first_line})")


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    program_digest: str
    inputs_digest: str | None
    registered: bool
    bad_lines: list[dict[str, Any]]
    principal: str | None = None
    tenant: str | None = None
    """Who the job's runs are bound to (its idempotency keys are scoped to them); None in a job
    started by a version that did not record them, or not yet run."""
    key_field: str | None = None
    """The field its items are keyed by (None: their line numbers), when ``key_recorded``."""
    key_recorded: bool = False
    """False in a job started by a version that did not record its key field."""


@dataclass(frozen=True)
class StoredItem:
    key: str
    line: int
    data: dict[str, Any]
    status: ItemStatus
    attempts: int
    run_id: str | None = None
    result: Any = None
    error: str | None = None
    calls: int = 0
    duration_ms: float = 0.0


@dataclass(frozen=True)
class Runnable:
    """Which items of a job a run runs: those never run or cut off by a crash (``pending``,
    ``running``), ``failed`` ones with attempts left, and on request ``unknown`` ones (after
    ``codemode ledger reconcile``) and ``unverified`` ones (their verify program only)."""

    max_attempts: int
    retry_unknown: bool = False
    reverify: bool = False

    def where(self) -> tuple[str, tuple[Any, ...]]:
        """The SQL condition on an item row, and its parameters."""
        states = ["pending", "running", "failed"]
        states += ["unknown"] if self.retry_unknown else []
        states += ["unverified"] if self.reverify else []
        marks = ",".join("?" * len(states))
        return f"(status IN ({marks}) AND (status != 'failed' OR attempts < ?))", (*states, self.max_attempts)


class JobStore(Protocol):
    def job(self, job_id: str) -> JobRecord | None: ...
    def begin_registration(
        self,
        job_id: str,
        program_digest: str,
        principal: str | None = None,
        tenant: str | None = None,
        key_field: str | EllipsisType | None = ...,
    ) -> JobRecord: ...
    def bind_identity(self, job_id: str, principal: str, tenant: str) -> tuple[JobRecord, bool]: ...
    def register(self, job_id: str, items: Iterable[tuple[str, int, dict[str, Any]]]) -> None: ...
    def finish_registration(
        self, job_id: str, inputs_digest: str, bad_lines: list[dict[str, Any]]
    ) -> None: ...
    def runnable(
        self, job_id: str, *, max_attempts: int, retry_unknown: bool, reverify: bool = False
    ) -> Iterator[StoredItem]: ...
    def todo(self, job_id: str, runs: Runnable) -> int: ...
    def start(self, job_id: str, key: str) -> int: ...
    def finish(self, job_id: str, item: StoredItem) -> None: ...
    def items(self, job_id: str) -> Iterator[StoredItem]: ...
    def settled(self, job_id: str, *, leaving_out: Runnable | None = None) -> Iterator[StoredItem]: ...
    def failures(self, job_id: str) -> Iterator[tuple[ItemStatus, int, str | None]]: ...
    def counts(self, job_id: str) -> dict[str, int]: ...
    def claim(self, job_id: str) -> None: ...
    def close(self) -> None: ...


class JobBusyError(RuntimeError):
    """Another process is running the job (it holds the job's lock)."""


class SqliteJobStore:
    """Jobs in a SQLite file beside the ledger (``codemode-jobs.db``), created 0600."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        self._conn = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.executescript(_SCHEMA)
        self._add_columns()
        self._lock = threading.Lock()
        self._claims: dict[str, int] = {}
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(f"{path}{suffix}", 0o600)

    def _add_columns(self) -> None:
        present = {str(row[1]) for row in self._conn.execute("PRAGMA table_info(jobs)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name in present:
                continue
            try:
                self._conn.execute(f"ALTER TABLE jobs ADD COLUMN {name} {kind}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # another process added it first
                    raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            for fd in self._claims.values():
                os.close(fd)  # releases the job's lock
            self._claims.clear()

    def claim(self, job_id: str) -> None:
        """Hold ``job_id``'s lock until :meth:`close`: two processes running one job would run
        its items twice (the ledger keeps their writes single; their states would be last-writer-
        wins). An advisory ``flock`` on a file beside the store: the kernel drops it when the
        process ends, however it ends, so a killed run never blocks its resume.

        Raises:
            JobBusyError: another process holds it (its pid is in the message when known).
        """
        if job_id in self._claims:
            return
        digest = hashlib.sha256(job_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        lock_path = f"{self.path}.job-{digest}.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise JobBusyError(
                f"job {job_id!r} is running in another process{who}; wait for it to finish, or stop it "
                "and resume the job"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._claims[job_id] = fd

    def job(self, job_id: str) -> JobRecord | None:
        with self._lock:
            return self._job(job_id)

    def _job(self, job_id: str) -> JobRecord | None:
        row = self._conn.execute(
            "SELECT job_id, program_digest, inputs_digest, registered, bad_lines, principal, tenant, "
            "key_field FROM jobs WHERE job_id = ?",
            (job_id,),
        ).fetchone()
        if row is None:
            return None
        # The key field is stored as JSON, so that "keyed by line number" (null) is told apart
        # from "not recorded" (NULL, an older version).
        key_field = None if row[7] is None else json.loads(row[7])
        return JobRecord(
            row[0],
            row[1],
            row[2],
            bool(row[3]),
            json.loads(row[4]),
            row[5],
            row[6],
            key_field,
            row[7] is not None,
        )

    def begin_registration(
        self,
        job_id: str,
        program_digest: str,
        principal: str | None = None,
        tenant: str | None = None,
        key_field: str | EllipsisType | None = ...,
    ) -> JobRecord:
        """Create the job, or start the registration of one whose registration was cut short
        over again: its items so far are deleted and its digests replaced, in one transaction.
        A registered job without a single item starts over too: nothing ever ran in it.
        ``key_field``: the field its items are keyed by (None: line numbers); not given, it is not
        recorded (as by an older version), and a resume cannot check it.

        A registration is committed page by page, so a crash, a Ctrl-C or a ``--strict`` bad line
        can leave some items behind; nothing ever ran for them (items run only once ``registered``
        is set), so forgetting them is safe and no page of an earlier input survives.
        """
        recorded_key = None if key_field is ... else json.dumps(key_field)
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                found = self._job(job_id)
                if found is not None and found.registered and self._has_items(job_id):
                    raise ValueError(f"job {job_id!r} is registered already")
                self._conn.execute("DELETE FROM items WHERE job_id = ?", (job_id,))
                self._conn.execute(
                    "INSERT INTO jobs (job_id, created_at, program_digest, principal, tenant, key_field) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE SET "
                    "program_digest = excluded.program_digest, inputs_digest = NULL, bad_lines = '[]', "
                    "registered = 0, principal = excluded.principal, tenant = excluded.tenant, "
                    "key_field = excluded.key_field",
                    (job_id, time.time(), program_digest, principal, tenant, recorded_key),
                )
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        if key_field is ...:
            return JobRecord(job_id, program_digest, None, False, [], principal, tenant)
        return JobRecord(job_id, program_digest, None, False, [], principal, tenant, key_field, True)

    def _has_items(self, job_id: str) -> bool:
        return (
            self._conn.execute("SELECT 1 FROM items WHERE job_id = ? LIMIT 1", (job_id,)).fetchone()
            is not None
        )

    def bind_identity(self, job_id: str, principal: str, tenant: str) -> tuple[JobRecord, bool]:
        """Record who the job runs as, unless it is recorded already; returns the job as stored
        and whether this call recorded it."""
        with self._lock:
            bound = self._conn.execute(
                "UPDATE jobs SET principal = ?, tenant = ? WHERE job_id = ? AND principal IS NULL",
                (principal, tenant, job_id),
            ).rowcount
            found = self._job(job_id)
        if found is None:
            raise ValueError(f"there is no job {job_id!r}")
        return found, bound == 1

    def register(self, job_id: str, items: Iterable[tuple[str, int, dict[str, Any]]]) -> None:
        """Insert items page by page; a key seen twice raises :class:`DuplicateKeyError`."""
        page: list[tuple[str, str, int, str]] = []
        for key, line, data in items:
            page.append((job_id, key, line, json.dumps(data, ensure_ascii=False)))
            if len(page) >= PAGE:
                self._insert(page)
                page = []
        if page:
            self._insert(page)

    def _insert(self, page: list[tuple[str, str, int, str]]) -> None:
        with self._lock:
            try:
                self._conn.execute("BEGIN")
                self._conn.executemany(
                    "INSERT INTO items (job_id, key, line, data) VALUES (?, ?, ?, ?)", page
                )
                self._conn.execute("COMMIT")
            except sqlite3.IntegrityError:
                self._conn.execute("ROLLBACK")
                self._raise_duplicate(page)
                raise

    def _raise_duplicate(self, page: list[tuple[str, str, int, str]]) -> None:
        seen: dict[str, int] = {}
        for job_id, key, line, _ in page:
            if key in seen:
                raise DuplicateKeyError(key, line, seen[key])
            row = self._conn.execute(
                "SELECT line FROM items WHERE job_id = ? AND key = ?", (job_id, key)
            ).fetchone()
            if row is not None:
                raise DuplicateKeyError(key, line, int(row[0]))
            seen[key] = line

    def finish_registration(self, job_id: str, inputs_digest: str, bad_lines: list[dict[str, Any]]) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE jobs SET registered = 1, inputs_digest = ?, bad_lines = ? WHERE job_id = ?",
                (inputs_digest, json.dumps(bad_lines), job_id),
            )

    def runnable(
        self, job_id: str, *, max_attempts: int, retry_unknown: bool, reverify: bool = False
    ) -> Iterator[StoredItem]:
        """Items still to run, in input order, read a page at a time (keyset on the line number).

        ``running`` items were cut off by a crash: they run again (their completed calls replay).
        Each comes with what is stored of its last run: an ``unverified`` item's result is what
        its verify program checks again.
        """
        where, params = Runnable(max_attempts, retry_unknown, reverify).where()
        return self._paged(job_id, where, params)

    def todo(self, job_id: str, runs: Runnable) -> int:
        """How many items :meth:`runnable` would yield now."""
        where, params = runs.where()
        with self._lock:
            row = self._conn.execute(
                f"SELECT COUNT(*) FROM items WHERE job_id = ? AND {where}",  # noqa: S608
                (job_id, *params),
            ).fetchone()
        return int(row[0])

    def start(self, job_id: str, key: str) -> int:
        """Mark an item running and count the attempt; returns the attempt number."""
        with self._lock:
            self._conn.execute(
                "UPDATE items SET status = 'running', attempts = attempts + 1, updated_at = ? "
                "WHERE job_id = ? AND key = ?",
                (time.time(), job_id, key),
            )
            row = self._conn.execute(
                "SELECT attempts FROM items WHERE job_id = ? AND key = ?", (job_id, key)
            ).fetchone()
        return int(row[0])

    def finish(self, job_id: str, item: StoredItem) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE items SET status = ?, run_id = ?, result = ?, error = ?, calls = ?, duration_ms = ?, "
                "updated_at = ? WHERE job_id = ? AND key = ?",
                (
                    item.status,
                    item.run_id,
                    json.dumps(item.result, ensure_ascii=False, default=str),
                    item.error,
                    item.calls,
                    item.duration_ms,
                    time.time(),
                    job_id,
                    item.key,
                ),
            )

    def items(self, job_id: str) -> Iterator[StoredItem]:
        return self._paged(job_id, "1 = 1", ())

    def settled(self, job_id: str, *, leaving_out: Runnable | None = None) -> Iterator[StoredItem]:
        """The items that have an outcome, in input order; without those that a run
        ``leaving_out`` runs (they are to get a new one)."""
        where, params = f"status IN ({','.join('?' * len(SETTLED))})", tuple[Any, ...](SETTLED)
        if leaving_out is not None:
            runs, more = leaving_out.where()
            where, params = f"{where} AND NOT {runs}", (*params, *more)
        return self._paged(job_id, where, params)

    def failures(self, job_id: str) -> Iterator[tuple[ItemStatus, int, str | None]]:
        """The status, attempts and error of each failed, unknown or unverified item (not its data)."""
        marks = ",".join("?" * len(FINAL_BAD))
        after = -1
        while True:
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT line, status, attempts, error FROM items WHERE job_id = ? AND line > ? "  # noqa: S608
                    f"AND status IN ({marks}) ORDER BY line LIMIT ?",
                    (job_id, after, *FINAL_BAD, PAGE),
                ).fetchall()
            if not rows:
                return
            for _, status, attempts, error in rows:
                yield status, int(attempts), error
            after = rows[-1][0]

    def _paged(self, job_id: str, where: str, params: tuple[Any, ...]) -> Iterator[StoredItem]:
        """The job's items that meet ``where``, in input order, a page at a time."""
        after = -1
        while True:
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT {_ITEM_COLUMNS} FROM items WHERE job_id = ? AND line > ? AND {where} "  # noqa: S608
                    "ORDER BY line LIMIT ?",
                    (job_id, after, *params, PAGE),
                ).fetchall()
            if not rows:
                return
            for key, line, data, status, attempts, run_id, result, error, calls, duration in rows:
                value = json.loads(result) if result is not None else None
                yield StoredItem(
                    key, line, json.loads(data), status, attempts, run_id, value, error, calls, duration
                )
            after = rows[-1][1]

    def counts(self, job_id: str) -> dict[str, int]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT status, COUNT(*) FROM items WHERE job_id = ? GROUP BY status", (job_id,)
            ).fetchall()
        return {str(status): int(count) for status, count in rows}


def open_job_store(ledger_path: Path) -> SqliteJobStore:
    """The job store beside a ledger: ``codemode.db`` → ``codemode-jobs.db``."""
    return SqliteJobStore(ledger_path.with_name(f"{ledger_path.stem}-jobs.db"))


def is_bad(status: str) -> bool:
    return status in FINAL_BAD
