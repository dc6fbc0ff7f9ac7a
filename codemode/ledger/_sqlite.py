"""The embedded ledger: one SQLite file in WAL mode.

Concurrency model:

* Every change is one ``BEGIN IMMEDIATE`` transaction. SQLite lets one writer at a time hold
  that lock across *all* processes using the file, so "read the key's rows, decide, write"
  is atomic across threads and processes alike; the busy timeout makes the others wait.
* One connection per ledger object, guarded by a lock. Writes serialise in SQLite anyway,
  and the calls are short; the broker runs them in worker threads (``anyio.to_thread``).
* ``synchronous=FULL``: a commit is on disk before ``reserve``/``mark_sent`` return, so a
  request is never sent before its record could survive a power cut. ``reserve`` and
  ``complete`` take ``durable=False`` for calls without side effects (the broker passes it for
  read-only calls without an idempotency key): those commits skip the fsync, survive any crash
  of the process but not necessarily a power cut, and are made durable by the next fsync'd one.

Every change goes through :meth:`SqliteLedger._emit`, which appends a hash-chained event and
applies it to the derived row with the same reducer that ``verify`` replays.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Generator, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from codemode.calls import CallFailed, ContentBlock, RunBinding, ToolError, ToolResult
from codemode.catalog._hashing import canonical_json
from codemode.errors import LedgerError
from codemode.ledger._chain import event_hash, genesis_hash, payload_text
from codemode.ledger._digest import arguments_digest, canonical_arguments, scoped_key, sha256_text
from codemode.ledger._errors import LeaseLostError, LedgerStateError
from codemode.ledger._gate import WriterGate
from codemode.ledger._models import (
    IN_FLIGHT,
    REPLAYABLE,
    ApprovalConsumed,
    ApprovalRecord,
    ApprovalRefused,
    ApprovalUse,
    CallIntent,
    CallRecord,
    CallState,
    Completion,
    Conflict,
    Fresh,
    InFlight,
    LedgerEvent,
    RecoveryReport,
    Replay,
    Reservation,
    Resolution,
    RunRecord,
    Unresolved,
    VerifyReport,
)
from codemode.ledger._owner import new_owner, owner_alive
from codemode.ledger._reduce import EVENT_KINDS, ReduceError, Row, reduce
from codemode.ledger._schema import COLUMNS, DDL, PRIMARY_KEY, SCHEMA_VERSION, Table
from codemode.ledger._store import Ledger
from codemode.ledger._time import Clock, from_text, later, system_clock, to_text
from codemode.ledger._verify import verify_connection

DEFAULT_LEASE_S = 120.0
DEFAULT_MAX_RESULT_BYTES = 256 * 1024
DEFAULT_BUSY_TIMEOUT_S = 30.0

Synchronous = Literal["full", "normal"]
_MAX_REASON_CHARS = 2000
_RISK_ORDER = {"low": 0, "medium": 1, "high": 2}
_RESERVED = frozenset({"reserved"})
_SENT = frozenset({"sent"})
_UNKNOWN = frozenset({"unknown"})
_SENT_OR_UNKNOWN = frozenset({"sent", "unknown"})


def _opt_time(text: str | int | None) -> datetime | None:
    return None if text is None else from_text(str(text))


def _json_or_none(text: str | int | None) -> Any:
    return None if text is None else json.loads(str(text))


def _call_record(row: Row) -> CallRecord:
    return CallRecord(
        call_id=str(row["call_id"]),
        run_id=str(row["run_id"]),
        attempt=cast("int | None", row["attempt"]),
        trace_id=str(row["trace_id"]),
        principal=str(row["principal"]),
        tenant=str(row["tenant"]),
        server=str(row["server"]),
        tool=str(row["tool"]),
        schema_hash=str(row["schema_hash"]),
        tool_version=cast("str | None", row["tool_version"]),
        idempotency_key=cast("str | None", row["idem_key"]),
        args_digest=str(row["args_digest"]),
        arguments=_json_or_none(row["args_json"]),
        resource_scope=cast("str | None", row["resource_scope"]),
        approval_id=cast("str | None", row["approval_id"]),
        state=cast(CallState, row["state"]),
        gate=cast("str | None", row["gate"]),
        reason=cast("str | None", row["reason"]),
        replay_of=cast("str | None", row["replay_of"]),
        owner=cast("str | None", row["owner"]),
        lease_expires_at=_opt_time(row["lease_expires_at"]),
        created_at=from_text(str(row["created_at"])),
        sent_at=_opt_time(row["sent_at"]),
        completed_at=_opt_time(row["completed_at"]),
        outcome_kind=cast("str | None", row["outcome_kind"]),
        result=_json_or_none(row["result_json"]),
        result_digest=cast("str | None", row["result_digest"]),
        result_bytes=cast("int | None", row["result_bytes"]),
        result_truncated=bool(row["result_truncated"]),
        receipt=cast("str | None", row["receipt"]),
        retry_after=_opt_time(row["retry_after"]),
        evidence=cast("str | None", row["evidence"]),
        resolved_by=cast("str | None", row["resolved_by"]),
        updated_at=from_text(str(row["updated_at"])),
    )


def _run_record(row: Row) -> RunRecord:
    return RunRecord(
        run_id=str(row["run_id"]),
        principal=str(row["principal"]),
        tenant=str(row["tenant"]),
        trace_id=str(row["trace_id"]),
        session_id=cast("str | None", row["session_id"]),
        code_digest=str(row["code_digest"]),
        status=str(row["status"]),
        summary=_json_or_none(row["summary_json"]),
        owner=cast("str | None", row["owner"]),
        started_at=from_text(str(row["started_at"])),
        finished_at=_opt_time(row["finished_at"]),
    )


def _approval_record(row: Row) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id=str(row["approval_id"]),
        tenant=str(row["tenant"]),
        principal=str(row["principal"]),
        server=str(row["server"]),
        tool=str(row["tool"]),
        args_digest=str(row["args_digest"]),
        risk=str(row["risk"]),
        call_id=cast("str | None", row["call_id"]),
        approver=str(row["approver"]),
        issued_at=from_text(str(row["issued_at"])),
        expires_at=from_text(str(row["expires_at"])),
        note=cast("str | None", row["note"]),
        used_at=_opt_time(row["used_at"]),
        used_by_call=cast("str | None", row["used_by_call"]),
    )


def _clip(text: str, limit: int = _MAX_REASON_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _scoped(intent: CallIntent) -> str | None:
    """The intent's idempotency key scoped to ``tenant:principal:server:tool:key``, if it has one."""
    if intent.idempotency_key is None:
        return None
    return scoped_key(intent.tenant, intent.principal, intent.server, intent.tool, intent.idempotency_key)


# What a call becoming unknown / abandoned writes, whether its owner or a lease expiry moves it.
def _unknown(reason: str, stamp: str) -> dict[str, Any]:
    return {"state": "unknown", "reason": reason, "lease_expires_at": None, "updated_at": stamp}


def _abandoned(reason: str, stamp: str) -> dict[str, Any]:
    return {
        "state": "abandoned",
        "reason": reason,
        "completed_at": stamp,
        "lease_expires_at": None,
        "updated_at": stamp,
    }


def _connect(location: str, busy_timeout_s: float, synchronous: Synchronous) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves. check_same_thread is
    # off because the broker calls from whichever worker thread anyio picks; all use of the
    # connection is serialised by the ledger's lock.
    conn = sqlite3.connect(location, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        if location != ":memory:":
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise LedgerError(f"ledger {location}: could not switch to WAL mode (got {mode})")
        conn.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'full' else 'NORMAL'}")
    except BaseException:
        conn.close()
        raise
    return conn


class SqliteLedger:
    """The operation ledger on one SQLite file. Thread-safe; safe across processes.

    Create it with :func:`open_ledger`. All methods block (file I/O and, under contention,
    waiting for SQLite's write lock); call them from a worker thread in async code.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        location: str,
        *,
        clock: Clock,
        owner: str,
        lease_s: float,
        store_arguments: bool,
        max_result_bytes: int,
        gate: WriterGate,
        synchronous: Synchronous = "full",
    ) -> None:
        self._conn = conn
        self._synchronous = synchronous
        self._location = location
        self._clock = clock
        self._owner = owner
        self._lease_s = lease_s
        self._store_arguments = store_arguments
        self._max_result_bytes = max_result_bytes
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._gate = gate
        self._genesis = ""
        self._init_schema()

    # ── plumbing ────────────────────────────────────────────────────────────────────────────

    @property
    def location(self) -> str:
        return self._location

    @property
    def owner(self) -> str:
        """This ledger object's lease owner id (``host:pid:started:nonce``)."""
        return self._owner

    def _fail(self, action: str, exc: BaseException) -> LedgerError:
        return LedgerError(f"ledger {self._location}: {action} failed: {exc}")

    @contextlib.contextmanager
    def _transaction(self, *, write: bool, durable: bool = True) -> Generator[sqlite3.Connection]:
        gate = self._gate.held() if write else contextlib.nullcontext()
        relax = not durable and self._synchronous == "full"
        with self._lock, gate:
            if self._closed:
                raise LedgerError(f"ledger {self._location} is closed")
            conn = self._conn
            try:
                if relax:  # this commit only: no fsync (see the module docstring)
                    conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                self._restore_synchronous(relax)
                raise self._fail("starting a transaction", exc) from exc
            try:
                yield conn
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
                self._changed.notify_all()

    def _restore_synchronous(self, relaxed: bool) -> None:
        if relaxed:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("PRAGMA synchronous = FULL")

    def _write(self, *, durable: bool = True) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self._transaction(write=True, durable=durable)

    def _read(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        # A deferred transaction gives a consistent snapshot for multi-query reads (WAL).
        return self._transaction(write=False)

    def _init_schema(self) -> None:
        with self._write() as conn:
            has_meta = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
            meta = {}
            if has_meta:
                meta = {str(r["key"]): str(r["value"]) for r in conn.execute("SELECT key, value FROM meta")}
            if "schema_version" not in meta:
                has_events = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'"
                ).fetchone()
                if has_events:
                    # Re-creating meta would mint a new ledger id and orphan the whole chain.
                    raise LedgerError(
                        f"ledger {self._location} has events but no schema metadata: it is damaged "
                        "or was tampered with; keep the file for inspection and start a new ledger"
                    )
                for statement in DDL:
                    conn.execute(statement)
                ledger_id = uuid.uuid4().hex
                meta = {
                    "schema_version": str(SCHEMA_VERSION),
                    "ledger_id": ledger_id,
                    "created_at": to_text(self._clock()),
                }
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta.items())
                conn.execute("INSERT INTO head (id, seq, hash) VALUES (1, 0, ?)", (genesis_hash(ledger_id),))
            elif meta["schema_version"] != str(SCHEMA_VERSION):
                raise LedgerError(
                    f"ledger {self._location} has schema version {meta['schema_version']}; this codemode "
                    f"reads version {SCHEMA_VERSION}. Use the codemode version that wrote it."
                )
            self._genesis = genesis_hash(meta["ledger_id"])

    def _now(self) -> datetime:
        return self._clock()

    def _row(self, conn: sqlite3.Connection, table: Table, key: str) -> Row | None:
        # Table and column names below come from _schema constants, never from input.
        sql = f"SELECT * FROM {table} WHERE {PRIMARY_KEY[table]} = ?"  # noqa: S608
        found = conn.execute(sql, (key,)).fetchone()
        return None if found is None else dict(found)

    def _emit(
        self,
        conn: sqlite3.Connection,
        kind: str,
        subject: str,
        fields: Mapping[str, Any],
        *,
        current: Row | None = None,
    ) -> Row:
        """Append one event and apply it to its row. Must run inside a write transaction.

        ``current`` is the subject's row as already read in this transaction, to save reading
        it again; without it the row is looked up.
        """
        table = EVENT_KINDS[kind][0]
        if current is None:
            current = self._row(conn, table, subject)
        try:
            _, new = reduce(kind, subject, fields, current)
        except ReduceError as exc:
            raise LedgerStateError(f"{subject}: {exc}") from exc
        head = conn.execute("SELECT seq, hash FROM head WHERE id = 1").fetchone()
        last = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        last_seq, last_hash = (0, self._genesis) if last is None else (int(last[0]), str(last[1]))
        if head is None or (int(head[0]), str(head[1])) != (last_seq, last_hash):
            # Writing now would re-seal a truncated or spliced log under a fresh head.
            raise LedgerError(
                f"ledger {self._location}: the log ends at event {last_seq} but its head says "
                f"{'nothing' if head is None else head[0]}: events were removed or added outside codemode. "
                "Refusing to write; run 'codemode ledger verify'."
            )
        seq = last_seq + 1
        at = to_text(self._now())
        payload = payload_text(dict(fields))
        digest = event_hash(last_hash, seq=seq, at=at, kind=kind, subject=subject, payload=payload)
        conn.execute(
            "INSERT INTO events (seq, at, kind, subject, payload, prev_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (seq, at, kind, subject, payload, last_hash, digest),
        )
        # The reducer checked every field name against _schema.COLUMNS: no input reaches the SQL.
        if current is None:
            columns = list(COLUMNS[table])
            marks = ", ".join("?" for _ in columns)
            sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"  # noqa: S608
            conn.execute(sql, [new[c] for c in columns])
        else:
            names = list(fields)
            assignments = ", ".join(f"{n} = ?" for n in names)
            sql = f"UPDATE {table} SET {assignments} WHERE {PRIMARY_KEY[table]} = ?"  # noqa: S608
            conn.execute(sql, [*(fields[n] for n in names), subject])
        conn.execute("UPDATE head SET seq = ?, hash = ? WHERE id = 1", (seq, digest))
        return new

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                self._gate.close()

    def __enter__(self) -> SqliteLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ── runs ────────────────────────────────────────────────────────────────────────────────

    def begin_run(self, binding: RunBinding, code_digest: str) -> RunRecord:
        """Record that a run started, bound to its principal, tenant and trace."""
        with self._write() as conn:
            now = to_text(self._now())
            row = self._emit(
                conn,
                "run_started",
                binding.run_id,
                {
                    "run_id": binding.run_id,
                    "principal": binding.principal,
                    "tenant": binding.tenant,
                    "trace_id": binding.trace_id,
                    "session_id": binding.session_id,
                    "code_digest": code_digest,
                    "status": "running",
                    "owner": self._owner,
                    "started_at": now,
                },
            )
        return _run_record(row)

    def finish_run(self, run_id: str, status: str, summary: Mapping[str, Any] | None = None) -> RunRecord:
        """Record how a run ended (``ok``, ``error``, ``timeout``, …) with its summary."""
        if not status or status == "running":
            raise LedgerStateError("finish_run needs a final status (e.g. 'ok', 'error', 'timeout')")
        summary_json = None if summary is None else canonical_json(dict(summary)).decode("utf-8")
        with self._write() as conn:
            row = self._emit(
                conn,
                "run_finished",
                run_id,
                {"status": status, "summary_json": summary_json, "finished_at": to_text(self._now())},
            )
        return _run_record(row)

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._read() as conn:
            row = self._row(conn, "runs", run_id)
        return None if row is None else _run_record(row)

    def list_runs(self, *, limit: int = 50) -> list[RunRecord]:
        """Most recent first."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM runs ORDER BY started_at DESC, run_id DESC LIMIT ?", (limit,)
            ).fetchall()
        return [_run_record(dict(r)) for r in rows]

    # ── calls: before sending ───────────────────────────────────────────────────────────────

    def _free_call_id(self, conn: sqlite3.Connection, call_id: str) -> str:
        # A retried attempt of the same stub call gets "<call_id>#2", "#3", …
        candidate, n = call_id, 1
        while conn.execute("SELECT 1 FROM calls WHERE call_id = ?", (candidate,)).fetchone():
            n += 1
            candidate = f"{call_id}#{n}"
        return candidate

    def _intent_fields(self, intent: CallIntent) -> dict[str, Any]:
        """The columns a call's row takes from its intent, with the scoped key and the argument
        digest that ``reserve`` decides on. Computed once per call, before the write lock."""
        canonical = canonical_arguments(intent.arguments)
        return {
            "run_id": intent.run_id,
            "trace_id": intent.trace_id,
            "principal": intent.principal,
            "tenant": intent.tenant,
            "server": intent.server,
            "tool": intent.tool,
            "schema_hash": intent.schema_hash,
            "tool_version": intent.tool_version,
            "idem_key": _scoped(intent),
            "args_digest": sha256_text(canonical),
            "args_json": canonical.decode("utf-8") if self._store_arguments else None,
            "resource_scope": intent.resource_scope,
            "approval_id": intent.approval_id,
            "result_truncated": 0,
        }

    def _new_call(
        self,
        conn: sqlite3.Connection,
        call_id: str,
        intent_fields: Mapping[str, Any],
        kind: str,
        stamp: str,
        fields: Mapping[str, Any],
    ) -> Row:
        """Create a call's row under ``call_id`` (or the next free ``call_id#n``)."""
        own_id = self._free_call_id(conn, call_id)
        created = {"call_id": own_id, "created_at": stamp, "updated_at": stamp}
        return self._emit(conn, kind, own_id, {**intent_fields, **created, **fields})

    def _lease_live(self, row: Row, now: datetime) -> bool:
        expires = row["lease_expires_at"]
        if expires is None or str(expires) <= to_text(now):
            return False
        if row["owner"] == self._owner:
            return True  # we are running, whatever the process table says
        # On this host a vanished owner frees its lease at once instead of at expiry.
        return owner_alive(cast("str | None", row["owner"])) is not False

    def _expire(self, conn: sqlite3.Connection, row: Row, now: datetime) -> Row:
        """Settle a call in flight whose owner is gone or whose lease ran out."""
        owner = row["owner"]
        gone = owner_alive(cast("str | None", owner)) is False
        why = (
            f"owner {owner} is gone"
            if gone
            else f"lease of owner {owner} expired at {row['lease_expires_at']}"
        )
        call_id, stamp = str(row["call_id"]), to_text(now)
        if row["state"] == "sent":
            reason = (
                f"sent, but no answer was recorded: {why}. The server may or may not have "
                "executed it; reconcile it, never retry it blindly."
            )
            return self._emit(conn, "call_unknown", call_id, _unknown(reason, stamp), current=row)
        reason = f"reserved but never sent: {why}"
        return self._emit(conn, "call_abandoned", call_id, _abandoned(reason, stamp), current=row)

    def _create_reserved(
        self,
        conn: sqlite3.Connection,
        call_id: str,
        intent_fields: Mapping[str, Any],
        attempt: int,
        now: datetime,
        lease_s: float,
        send: bool,
    ) -> Fresh:
        stamp = to_text(now)
        fields = {
            "attempt": attempt,
            "state": "reserved",
            "owner": self._owner,
            "lease_expires_at": later(now, lease_s),
        }
        row = self._new_call(conn, call_id, intent_fields, "call_reserved", stamp, fields)
        own_id = str(row["call_id"])
        if send:
            sent = {"state": "sent", "sent_at": stamp, "updated_at": stamp}
            self._emit(conn, "call_sent", own_id, sent, current=row)
        return Fresh(call_id=own_id, attempt=attempt, sent=send)

    def _create_denied(
        self,
        conn: sqlite3.Connection,
        call_id: str,
        intent_fields: Mapping[str, Any],
        now: datetime,
        gate: str,
        reason: str,
    ) -> Row:
        stamp = to_text(now)
        fields = {"state": "denied", "gate": gate, "reason": _clip(reason), "completed_at": stamp}
        return self._new_call(conn, call_id, intent_fields, "call_denied", stamp, fields)

    def would_replay(self, intent: CallIntent) -> bool:
        """Whether :meth:`reserve` would answer this keyed call with a replay of its first result.

        Read-only and advisory (the broker uses it to skip asking for consent again for an
        operation that already ran); ``reserve`` still decides, atomically.
        """
        key = _scoped(intent)
        if key is None:
            return False
        with self._read() as conn:
            first = conn.execute(
                "SELECT args_digest FROM calls WHERE idem_key = ? AND attempt = 1", (key,)
            ).fetchone()
            if first is None or first[0] != arguments_digest(intent.arguments):
                return False
            latest = conn.execute(
                "SELECT state FROM calls WHERE idem_key = ? AND attempt IS NOT NULL "
                "ORDER BY attempt DESC LIMIT 1",
                (key,),
            ).fetchone()
        return latest is not None and str(latest[0]) in REPLAYABLE

    def reserve(
        self, intent: CallIntent, *, lease_s: float | None = None, send: bool = False, durable: bool = True
    ) -> Reservation:
        """Write the call's record before it is sent, and decide whether it may be sent.

        Without an idempotency key the answer is always :class:`Fresh`. With one (scoped to
        ``tenant:principal:server:tool:key``):

        * first use → :class:`Fresh` (attempt 1), holding the key under a lease;
        * the key's first use had other arguments → :class:`Conflict` (recorded as denied);
        * a call with the key is running under a live lease → :class:`InFlight` (nothing
          recorded; wait for it, then reserve again);
        * the key's call has an unknown outcome → :class:`Unresolved` (recorded as denied);
        * the key's call succeeded, failed or was reconciled as succeeded → :class:`Replay`
          of its stored outcome, errors included (recorded as ``replayed``);
        * the key's last attempt was refused, abandoned or reconciled as failed (so nothing
          happened) → :class:`Fresh` with the next attempt number.

        A call in flight whose owner died or whose lease expired is settled first: ``sent``
        becomes ``unknown`` (never a silent retry), ``reserved`` becomes ``abandoned``.

        ``send=True`` records a :class:`Fresh` call as ``sent`` in the same transaction (one
        fsync instead of two; ``Fresh.sent`` is then True and ``mark_sent`` is skipped). Use it
        only when the request goes out right after: a crash between this commit and the send
        leaves an ``unknown`` call to reconcile instead of an ``abandoned`` one to retry.

        ``durable=False`` skips the fsync of this commit: only for calls without side effects.
        """
        base = self._intent_fields(intent)
        key, digest = base["idem_key"], base["args_digest"]
        lease = self._lease_s if lease_s is None else lease_s
        with self._write(durable=durable) as conn:
            now = self._now()
            if key is None:
                return self._create_reserved(conn, intent.call_id, base, 1, now, lease, send)
            first = conn.execute("SELECT * FROM calls WHERE idem_key = ? AND attempt = 1", (key,)).fetchone()
            if first is None:
                return self._create_reserved(conn, intent.call_id, base, 1, now, lease, send)
            if first["args_digest"] != digest:
                reason = (
                    f"idempotency key {intent.idempotency_key!r} was first used by call {first['call_id']} "
                    "with different arguments; a key names one operation. Use a new key for new arguments."
                )
                own = self._create_denied(conn, intent.call_id, base, now, "side_effects", reason)
                return Conflict(
                    call_id=str(own["call_id"]), existing_call_id=str(first["call_id"]), reason=reason
                )
            latest: Row = dict(
                conn.execute(
                    "SELECT * FROM calls WHERE idem_key = ? AND attempt IS NOT NULL "
                    "ORDER BY attempt DESC LIMIT 1",
                    (key,),
                ).fetchone()
            )
            if latest["state"] in IN_FLIGHT:
                if self._lease_live(latest, now):
                    return InFlight(
                        call_id=str(latest["call_id"]),
                        owner=cast("str | None", latest["owner"]),
                        lease_expires_at=_opt_time(latest["lease_expires_at"]),
                    )
                latest = self._expire(conn, latest, now)
            state = str(latest["state"])
            if state == "unknown":
                reason = (
                    f"call {latest['call_id']} with the same idempotency key has an unknown outcome; it is "
                    "never retried automatically. Reconcile it: codemode ledger reconcile "
                    f"{latest['call_id']} --succeeded|--failed --evidence TEXT"
                )
                own = self._create_denied(conn, intent.call_id, base, now, "side_effects", reason)
                return Unresolved(
                    call_id=str(own["call_id"]), unknown_call_id=str(latest["call_id"]), reason=reason
                )
            if state in REPLAYABLE:
                original = _call_record(latest)
                outcome = original.outcome()
                if outcome is None:  # cannot happen for rows written by this code; refuse, never re-run
                    raise LedgerStateError(f"call {original.call_id} is {state} but has no stored outcome")
                stamp = to_text(now)
                fields = {
                    "state": "replayed",
                    "replay_of": original.call_id,
                    "outcome_kind": latest["outcome_kind"],
                    "result_digest": latest["result_digest"],
                    "completed_at": stamp,
                }
                own = self._new_call(conn, intent.call_id, base, "call_replayed", stamp, fields)
                return Replay(call_id=str(own["call_id"]), original_call_id=original.call_id, outcome=outcome)
            # refused / abandoned / reconciled_failed: nothing happened, a new attempt may run.
            attempt = int(cast(int, latest["attempt"])) + 1
            return self._create_reserved(conn, intent.call_id, base, attempt, now, lease, send)

    def mark_denied(self, intent: CallIntent, *, gate: str, reason: str) -> CallRecord:
        """Record a call a gate refused. It is never sent and holds no idempotency key."""
        base = self._intent_fields(intent)
        with self._write() as conn:
            row = self._create_denied(conn, intent.call_id, base, self._now(), gate, reason)
        return _call_record(row)

    # ── calls: sending and after ────────────────────────────────────────────────────────────

    @staticmethod
    def _in_state(row: Row | None, call_id: str, states: frozenset[str], action: str) -> Row:
        if row is None:
            raise LedgerStateError(f"no call {call_id!r} in the ledger")
        if row["state"] not in states:
            raise LedgerStateError(
                f"cannot {action} call {call_id}: it is {row['state']} (needs {' or '.join(sorted(states))})"
            )
        return row

    def _require(self, conn: sqlite3.Connection, call_id: str, states: frozenset[str], action: str) -> Row:
        return self._in_state(self._row(conn, "calls", call_id), call_id, states, action)

    def _lease_lost(
        self, conn: sqlite3.Connection, row: Row, now: datetime, action: str
    ) -> LeaseLostError | None:
        """Why this ledger may no longer act on a call in flight, or None while it holds the lease.

        An expired lease is settled here (``unknown``/``abandoned``): the caller lets that
        commit, then raises the error.
        """
        if row["owner"] != self._owner:
            return LeaseLostError(
                f"cannot {action} call {row['call_id']}: its lease belongs to {row['owner']}"
            )
        if self._lease_live(row, now):
            return None
        self._expire(conn, row, now)
        return LeaseLostError(
            f"cannot {action} call {row['call_id']}: its lease expired at {row['lease_expires_at']}"
        )

    def mark_sent(self, call_id: str, *, lease_s: float | None = None) -> CallRecord:
        """Record that the request goes out now. Call it right before sending; if it raises, don't send.

        Raises :class:`LeaseLostError` when the lease expired meanwhile (the call is then
        ``abandoned`` and another caller may already run the key).
        """
        lease = self._lease_s if lease_s is None else lease_s
        # A lease that dies between this commit and the send (a stalled process) is caught the
        # other way round: the late complete() is accepted and the key shows the call as unknown.
        with self._write() as conn:
            now = self._now()
            row = self._row(conn, "calls", call_id)
            if row is not None and row["state"] == "abandoned" and row["owner"] == self._owner:
                # Someone settled our expired lease already; the caller must treat it the same way.
                raise LeaseLostError(f"cannot send call {call_id}: {row['reason']}")
            row = self._in_state(row, call_id, _RESERVED, "mark as sent")
            lost = self._lease_lost(conn, row, now, "send")
            if lost is None:
                stamp = to_text(now)
                sent = {
                    "state": "sent",
                    "sent_at": stamp,
                    "lease_expires_at": later(now, lease),
                    "updated_at": stamp,
                }
                row = self._emit(conn, "call_sent", call_id, sent, current=row)
        if lost is not None:
            raise lost
        return _call_record(row)

    def extend_lease(self, call_id: str, lease_s: float) -> CallRecord:
        """Keep a long call's lease alive (reserved or sent, owned by this ledger)."""
        with self._write() as conn:
            now = self._now()
            row = self._require(conn, call_id, IN_FLIGHT, "extend the lease of")
            lost = self._lease_lost(conn, row, now, "extend the lease of")
            if lost is None:
                extended = {"lease_expires_at": later(now, lease_s), "updated_at": to_text(now)}
                row = self._emit(conn, "lease_extended", call_id, extended, current=row)
        if lost is not None:
            raise lost
        return _call_record(row)

    def _stored_outcome(self, outcome: Completion) -> dict[str, Any]:
        full = canonical_json(outcome.model_dump(mode="json"))
        fields: dict[str, Any] = {
            "outcome_kind": outcome.kind,
            "result_digest": sha256_text(full),
            "result_bytes": len(full),
            "result_truncated": 0,
            "result_json": full.decode("utf-8"),
        }
        if len(full) <= self._max_result_bytes:
            return fields
        # Too large to keep: keep its digest and size, and a stand-in that a replay returns.
        note = (
            f"[result of {len(full)} bytes exceeded the ledger cap of {self._max_result_bytes} bytes; "
            f"{fields['result_digest']}]"
        )
        stand_in: Completion
        if isinstance(outcome, ToolResult):
            block = ContentBlock.model_validate({"type": "text", "text": note})
            stand_in = ToolResult(content=(block,), truncated=True)
        elif isinstance(outcome, ToolError):
            stand_in = ToolError(message=_clip(outcome.message, 4000) + " " + note)
        else:
            stand_in = CallFailed(reason=_clip(outcome.reason, 4000) + " " + note)
        fields["result_json"] = canonical_json(stand_in.model_dump(mode="json")).decode("utf-8")
        fields["result_truncated"] = 1
        return fields

    def complete(
        self, call_id: str, outcome: Completion, *, receipt: str | None = None, durable: bool = True
    ) -> CallRecord:
        """Record the server's answer: ``ToolResult`` → succeeded; ``ToolError`` or a definite
        ``CallFailed`` (e.g. a client error the server rejected) → failed. Both are replayed to
        later calls with the same key.

        A ``CallFailed`` with ``outcome_unknown=True`` is recorded as :meth:`mark_unknown`.
        Accepted for a ``sent`` call, and for an ``unknown`` one (a late answer settles it).
        ``durable=False`` skips the fsync of this commit: only for calls without side effects.
        """
        if isinstance(outcome, CallFailed) and outcome.outcome_unknown:
            return self.mark_unknown(call_id, outcome.reason)
        state = "succeeded" if isinstance(outcome, ToolResult) else "failed"
        fields = self._stored_outcome(outcome)
        with self._write(durable=durable) as conn:
            row = self._require(conn, call_id, _SENT_OR_UNKNOWN, "complete")
            stamp = to_text(self._now())
            fields |= {
                "state": state,
                "receipt": receipt,
                "completed_at": stamp,
                "lease_expires_at": None,
                "updated_at": stamp,
            }
            if row["state"] == "unknown":
                fields["resolved_by"] = "late answer"
            new = self._emit(conn, "call_completed", call_id, fields, current=row)
        return _call_record(new)

    def mark_refused(self, call_id: str, reason: str, *, retry_after_s: float | None = None) -> CallRecord:
        """The server refused *before executing* (429/503, or it was not reachable at all).

        Frees the key: a later :meth:`reserve` of the same key and arguments is :class:`Fresh`
        (next attempt). ``retry_after_s`` records the server's Retry-After for the backoff.
        """
        with self._write() as conn:
            row = self._require(conn, call_id, IN_FLIGHT, "mark as refused")
            now = self._now()
            stamp = to_text(now)
            refused = {
                "state": "refused",
                "reason": _clip(reason),
                "retry_after": None if retry_after_s is None else later(now, retry_after_s),
                "completed_at": stamp,
                "lease_expires_at": None,
                "updated_at": stamp,
            }
            new = self._emit(conn, "call_refused", call_id, refused, current=row)
        return _call_record(new)

    def mark_unknown(self, call_id: str, reason: str) -> CallRecord:
        """The request was sent and no answer came (timeout, lost stream, server died mid-call)."""
        with self._write() as conn:
            row = self._require(conn, call_id, _SENT, "mark as unknown")
            fields = _unknown(_clip(reason), to_text(self._now()))
            new = self._emit(conn, "call_unknown", call_id, fields, current=row)
        return _call_record(new)

    def mark_abandoned(self, call_id: str, reason: str) -> CallRecord:
        """A reserved call will not be sent after all (the run was cancelled before sending)."""
        with self._write() as conn:
            row = self._require(conn, call_id, _RESERVED, "abandon")
            fields = _abandoned(_clip(reason), to_text(self._now()))
            new = self._emit(conn, "call_abandoned", call_id, fields, current=row)
        return _call_record(new)

    def wait_for(self, call_id: str, timeout_s: float, *, poll_s: float = 0.05) -> CallRecord:
        """Block until ``call_id`` is no longer in flight, or ``timeout_s`` passes.

        Returns the record either way (check ``state``). Commits in this process wake it at
        once; commits by other processes are seen within ``poll_s``. A call whose owner died
        or whose lease expired is settled here (``unknown``/``abandoned``), so waiters never
        hang on a crashed broker.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                with self._read() as conn:
                    row = self._row(conn, "calls", call_id)
                if row is None:
                    raise LedgerStateError(f"no call {call_id!r} in the ledger")
                if row["state"] not in IN_FLIGHT:
                    return _call_record(row)
                if not self._lease_live(row, self._now()):
                    with self._write() as conn:  # settle it, unless that happened meanwhile
                        current = self._row(conn, "calls", call_id)
                        now = self._now()
                        if (
                            current is not None
                            and current["state"] in IN_FLIGHT
                            and not self._lease_live(current, now)
                        ):
                            self._expire(conn, current, now)
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return _call_record(row)
                self._changed.wait(min(poll_s, remaining))

    # ── reconciliation ──────────────────────────────────────────────────────────────────────

    def unknown_calls(self) -> list[CallRecord]:
        """Calls whose outcome is unknown, oldest first: each needs a human or a read-back."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM calls WHERE state = 'unknown' ORDER BY created_at, call_id"
            ).fetchall()
        return [_call_record(dict(r)) for r in rows]

    def resolve(
        self,
        call_id: str,
        resolution: Resolution,
        evidence: str,
        *,
        receipt: str | None = None,
        result: Any = None,
        resolved_by: str = "manual",
    ) -> CallRecord:
        """Settle an ``unknown`` call from evidence (a receipt, a read-back, a person's check).

        ``succeeded`` → ``reconciled_succeeded``: later calls with its key replay ``result``
        (or, without one, a result describing the reconciliation). ``failed`` →
        ``reconciled_failed``: the key is free, the broker may run it again.
        """
        evidence = evidence.strip()
        if not evidence:
            raise LedgerStateError("a resolution needs evidence: say what was checked and what it showed")
        if resolution not in ("succeeded", "failed"):
            raise LedgerStateError(f"resolution must be 'succeeded' or 'failed', not {resolution!r}")
        stored: Completion
        if resolution == "succeeded":
            described = {"reconciled": "succeeded", "evidence": evidence, "receipt": receipt}
            structured = result if result is not None else described
            stored = ToolResult(structured=structured)
        else:
            stored = CallFailed(reason=f"reconciled as not executed: {evidence}")
        fields = self._stored_outcome(stored)
        with self._write() as conn:
            row = self._require(conn, call_id, _UNKNOWN, "reconcile")
            stamp = to_text(self._now())
            fields |= {
                "state": f"reconciled_{resolution}",
                "evidence": _clip(evidence),
                "resolved_by": resolved_by,
                "receipt": receipt if receipt is not None else row["receipt"],
                "completed_at": stamp,
                "updated_at": stamp,
            }
            new = self._emit(conn, "call_reconciled", call_id, fields, current=row)
        return _call_record(new)

    # ── approvals ───────────────────────────────────────────────────────────────────────────

    def record_approval(self, approval: ApprovalRecord) -> ApprovalRecord:
        """Store an issued approval (unused). Its id must be new."""
        if approval.used_at is not None or approval.used_by_call is not None:
            raise LedgerStateError("record_approval takes an unused approval")
        with self._write() as conn:
            row = self._emit(
                conn,
                "approval_recorded",
                approval.approval_id,
                {
                    "approval_id": approval.approval_id,
                    "tenant": approval.tenant,
                    "principal": approval.principal,
                    "server": approval.server,
                    "tool": approval.tool,
                    "args_digest": approval.args_digest,
                    "risk": approval.risk,
                    "call_id": approval.call_id,
                    "approver": approval.approver,
                    "issued_at": to_text(approval.issued_at),
                    "expires_at": to_text(approval.expires_at),
                    "note": approval.note,
                },
            )
        return _approval_record(row)

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        with self._read() as conn:
            row = self._row(conn, "approvals", approval_id)
        return None if row is None else _approval_record(row)

    @staticmethod
    def _approval_mismatch(
        row: Row,
        *,
        call_id: str,
        tenant: str,
        principal: str,
        server: str,
        tool: str,
        args_digest: str,
        risk: str | None,
        now: str,
    ) -> str | None:
        if row["used_at"] is not None:
            return f"already used at {row['used_at']} by call {row['used_by_call']}; approvals are single-use"
        if str(row["expires_at"]) <= now:
            return f"expired at {row['expires_at']}"
        if (row["tenant"], row["principal"]) != (tenant, principal):
            return "issued for another tenant or principal"
        if (row["server"], row["tool"]) != (server, tool):
            return f"issued for {row['server']}/{row['tool']}, not {server}/{tool}"
        if row["call_id"] is not None and row["call_id"] != call_id:
            return f"bound to call {row['call_id']}, not {call_id}"
        if row["args_digest"] != args_digest:
            return "issued for other arguments (the argument digest differs)"
        if risk is not None and row["risk"] != risk:
            granted, needed = _RISK_ORDER.get(str(row["risk"])), _RISK_ORDER.get(risk)
            if granted is None or needed is None or granted < needed:
                return f"approved at risk {row['risk']}, the call is {risk}"
        return None

    def consume_approval(
        self,
        approval_id: str,
        *,
        call_id: str,
        tenant: str,
        principal: str,
        server: str,
        tool: str,
        args_digest: str,
        risk: str | None = None,
        now: datetime | None = None,
    ) -> ApprovalUse:
        """Use an approval for one call, atomically and once.

        Refused (nothing changes) when it is unknown, used, expired, for another tenant,
        principal, tool or call (when bound to one), for other arguments, or for a lower risk
        than ``risk`` (``low`` < ``medium`` < ``high``).
        """
        with self._write() as conn:
            row = self._row(conn, "approvals", approval_id)
            if row is None:
                return ApprovalRefused(approval_id=approval_id, reason="no such approval")
            moment = to_text(now if now is not None else self._now())
            why = self._approval_mismatch(
                row,
                call_id=call_id,
                tenant=tenant,
                principal=principal,
                server=server,
                tool=tool,
                args_digest=args_digest,
                risk=risk,
                now=moment,
            )
            if why is not None:
                return ApprovalRefused(approval_id=approval_id, reason=why)
            used = {"used_at": moment, "used_by_call": call_id}
            new = self._emit(conn, "approval_consumed", approval_id, used, current=row)
        return ApprovalConsumed(approval=_approval_record(new))

    def find_approvals(
        self,
        *,
        tenant: str,
        principal: str,
        server: str,
        tool: str,
        args_digest: str,
        usable_at: datetime | None = None,
    ) -> list[ApprovalRecord]:
        """Unused, unexpired pre-issued approvals (not bound to a call) matching a call exactly.

        The consent gate tries them in issue order with :meth:`consume_approval`, which re-checks
        everything atomically; this query only narrows the candidates.
        """
        moment = to_text(usable_at if usable_at is not None else self._now())
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM approvals WHERE used_at IS NULL AND call_id IS NULL "
                "AND tenant = ? AND principal = ? AND server = ? AND tool = ? AND args_digest = ? "
                "AND expires_at > ? ORDER BY issued_at",
                (tenant, principal, server, tool, args_digest, moment),
            ).fetchall()
        return [_approval_record(dict(r)) for r in rows]

    # ── queries ─────────────────────────────────────────────────────────────────────────────

    def get_call(self, call_id: str) -> CallRecord | None:
        with self._read() as conn:
            row = self._row(conn, "calls", call_id)
        return None if row is None else _call_record(row)

    def list_calls(
        self,
        *,
        run_id: str | None = None,
        state: CallState | None = None,
        limit: int = 100,
        newest_first: bool = True,
    ) -> list[CallRecord]:
        where: list[str] = []
        params: list[Any] = []
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if state is not None:
            where.append("state = ?")
            params.append(state)
        order = "DESC" if newest_first else "ASC"
        sql = "SELECT * FROM calls"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY created_at {order}, rowid {order} LIMIT ?"
        with self._read() as conn:
            rows = conn.execute(sql, [*params, limit]).fetchall()
        return [_call_record(dict(r)) for r in rows]

    def find_by_receipt(self, receipt: str) -> list[CallRecord]:
        """Calls whose side effect carries this external receipt id."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM calls WHERE receipt = ? ORDER BY created_at", (receipt,)
            ).fetchall()
        return [_call_record(dict(r)) for r in rows]

    def events(self, subject: str | None = None, *, limit: int | None = None) -> list[LedgerEvent]:
        """The event log (oldest first), optionally only one call's, run's or approval's events."""
        sql = "SELECT * FROM events"
        params: list[Any] = []
        if subject is not None:
            sql += " WHERE subject = ?"
            params.append(subject)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [
            LedgerEvent(
                seq=int(r["seq"]),
                at=from_text(str(r["at"])),
                kind=str(r["kind"]),
                subject=str(r["subject"]),
                payload=json.loads(str(r["payload"])),
                prev_hash=str(r["prev_hash"]),
                hash=str(r["hash"]),
            )
            for r in rows
        ]

    def head(self) -> tuple[int, str]:
        """``(seq, hash)`` of the last event: record it elsewhere to anchor a later ``verify``."""
        with self._read() as conn:
            row = conn.execute("SELECT seq, hash FROM head WHERE id = 1").fetchone()
        if row is None:
            raise LedgerError(f"ledger {self._location} has no head row: run 'codemode ledger verify'")
        return int(row[0]), str(row[1])

    # ── integrity and recovery ──────────────────────────────────────────────────────────────

    def verify(self, *, anchor: tuple[int, str] | None = None) -> VerifyReport:
        """Re-check the whole chain and re-derive every table from the events; see :mod:`._verify`."""
        with self._read() as conn:
            return verify_connection(conn, self._genesis_for(conn), anchor=anchor)

    def _genesis_for(self, conn: sqlite3.Connection) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchone()
        return None if row is None else genesis_hash(str(row[0]))

    def recover(self) -> RecoveryReport:
        """Settle what a vanished broker left behind (runs automatically on open).

        A call ``sent`` by a process that is gone (or whose lease expired) becomes
        ``unknown``: the broker died between send and commit, so the server may have executed
        it. A ``reserved`` one becomes ``abandoned`` (it was never sent; safe to retry). A
        ``running`` run of a vanished process becomes ``interrupted``.
        """
        unknown: list[str] = []
        abandoned: list[str] = []
        interrupted: list[str] = []
        with self._write() as conn:
            now = self._now()
            for found in conn.execute("SELECT * FROM calls WHERE state IN ('reserved', 'sent')").fetchall():
                row: Row = dict(found)
                if self._lease_live(row, now):
                    continue
                settled = self._expire(conn, row, now)
                (unknown if settled["state"] == "unknown" else abandoned).append(str(row["call_id"]))
            for found in conn.execute("SELECT run_id, owner FROM runs WHERE status = 'running'").fetchall():
                if owner_alive(found["owner"]) is False:
                    self._emit(
                        conn,
                        "run_interrupted",
                        str(found["run_id"]),
                        {"status": "interrupted", "finished_at": to_text(now)},
                    )
                    interrupted.append(str(found["run_id"]))
        return RecoveryReport(
            calls_unknown=tuple(unknown),
            calls_abandoned=tuple(abandoned),
            runs_interrupted=tuple(interrupted),
        )


def open_ledger(
    path: Path | str,
    *,
    create: bool = True,
    recover: bool = True,
    store_arguments: bool = True,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    lease_s: float = DEFAULT_LEASE_S,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    synchronous: Synchronous = "full",
    clock: Clock | None = None,
    owner: str | None = None,
) -> SqliteLedger:
    """Open (and with ``create``, create) the ledger at ``path``; ``":memory:"`` for a private one.

    ``recover`` settles calls left in flight by vanished processes (see
    :meth:`SqliteLedger.recover`). ``store_arguments=False`` keeps only the argument digest
    (no read-back reconciliation then). ``clock`` and ``owner`` exist for tests.

    ``synchronous="full"`` (default) fsyncs every commit: a record written before a send
    survives a power cut. ``"normal"`` (WAL) survives any crash of the process, but a power
    cut or OS crash may lose the last few commits, and with them the knowledge that a request
    was sent; it is roughly twice as fast. Choose it only where that trade is acceptable.
    """
    location = str(path)
    if location != ":memory:":
        file = Path(path)
        if not file.exists():
            if not create:
                raise LedgerError(f"no ledger at {file}: it is created by the first run that makes a call")
            try:
                file.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LedgerError(f"cannot create the directory of ledger {file}: {exc}") from exc
    gate = WriterGate(None if location == ":memory:" else f"{location}.lock", busy_timeout_s)
    conn: sqlite3.Connection | None = None
    try:
        # Inside the gate: switching a new file to WAL can fail with "database is locked"
        # without waiting when several processes create the ledger at the same moment.
        with gate.held():
            conn = _connect(location, busy_timeout_s, synchronous)
        ledger = SqliteLedger(
            conn,
            location,
            clock=clock or system_clock,
            owner=owner or new_owner(),
            lease_s=lease_s,
            store_arguments=store_arguments,
            max_result_bytes=max_result_bytes,
            gate=gate,
            synchronous=synchronous,
        )
        if recover:
            ledger.recover()
    except BaseException as exc:
        if conn is not None:
            conn.close()
        gate.close()
        if isinstance(exc, sqlite3.Error):
            raise LedgerError(f"cannot open ledger {location}: {exc}") from exc
        raise
    return ledger


if TYPE_CHECKING:
    # pyright proves here that SqliteLedger implements the Ledger protocol.
    _protocol_check: Ledger = cast(SqliteLedger, None)
