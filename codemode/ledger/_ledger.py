"""The ledger on any store: the :class:`codemode.ledger.Ledger` API over a :class:`LedgerStore`.

This class only holds the settings and says what each operation promises; the rules live in
the modules by concern (:mod:`._reservations`, :mod:`._calls`, :mod:`._leases`,
:mod:`._approvals`, :mod:`._runs`, :mod:`._sessions`, :mod:`._queries`, :mod:`._verify`), all
written against the store Protocol, so a second backend is a new store and nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from codemode.calls import RunBinding, ToolError, ToolResult
from codemode.ledger import _approvals, _calls, _leases, _plans, _queries, _reservations, _runs, _sessions
from codemode.ledger._api import Ledger
from codemode.ledger._archive_read import ArchiveReader
from codemode.ledger._chain import genesis_hash
from codemode.ledger._context import LedgerContext
from codemode.ledger._deferred import DeferredCompletion, DeferredRecords, write_deferred
from codemode.ledger._input_rounds import InputRoundBook
from codemode.ledger._models import (
    ApprovalRecord,
    ApprovalUse,
    CallIntent,
    CallRecord,
    CallState,
    Completion,
    LedgerEvent,
    RecoveryReport,
    Reservation,
    Resolution,
    RunRecord,
    SessionBinding,
    VerifyReport,
)
from codemode.ledger._plans import PlanRecord
from codemode.ledger._quotas import QuotaBook
from codemode.ledger._reads import ReadRecord
from codemode.ledger._sandbox_sessions import SandboxSessionBook
from codemode.ledger._skills import SkillBook
from codemode.ledger._tickets import ApprovalTicketBook
from codemode.ledger._time import Clock, to_text
from codemode.ledger._verify import verify_store
from codemode.ledger._workspaces import WorkspaceBook
from codemode.ledger.stores import ApprovalQuery, LedgerStore, RunFacet, RunQuery

DEFAULT_LEASE_S = 120.0
DEFAULT_MAX_RESULT_BYTES = 256 * 1024


class StoreLedger:
    """Runs, calls, approvals and receipts, hash-chained, on a :class:`LedgerStore`.

    Thread-safe as far as its store is. All methods block (I/O and, under contention, waiting
    for the store's write lock); call them from a worker thread in async code, except
    :meth:`record_read` and :meth:`complete_later`, which only queue. Closing the ledger writes
    what is queued, then closes its store. Every query, and ``finish_run``, first waits for the
    records queued before it, so what a caller submitted is what it reads back.
    """

    def __init__(
        self,
        store: LedgerStore,
        *,
        clock: Clock,
        owner: str,
        lease_s: float = DEFAULT_LEASE_S,
        store_arguments: bool = True,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        with store.transaction(write=False) as tx:
            ledger_id = tx.ledger_id()
        self._store = store
        self._ctx = LedgerContext(
            store=store,
            clock=clock,
            owner=owner,
            lease_s=lease_s,
            store_arguments=store_arguments,
            max_result_bytes=max_result_bytes,
            # A lost id is tampering: verify reports it; an empty log then cannot be extended.
            genesis="" if ledger_id is None else genesis_hash(ledger_id),
        )
        self._later = DeferredRecords(lambda batch: write_deferred(self._ctx, batch))

    @property
    def location(self) -> str:
        return self._store.location

    @property
    def owner(self) -> str:
        """This ledger object's lease owner id (``host:pid:started:nonce``)."""
        return self._ctx.owner

    @property
    def store(self) -> LedgerStore:
        return self._store

    def close(self) -> None:
        self._later.close()
        self._store.close()

    def _settled(self) -> None:
        """Wait for the records queued so far (cheap when none are)."""
        if self._later.pending:
            self._later.flush()

    def __enter__(self) -> StoreLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ── runs ────────────────────────────────────────────────────────────────────────────────

    def begin_run(self, binding: RunBinding, code_digest: str) -> RunRecord:
        """Record that a run started, bound to its principal, tenant and trace."""
        return _runs.begin_run(self._ctx, binding, code_digest)

    def finish_run(self, run_id: str, status: str, summary: Mapping[str, Any] | None = None) -> RunRecord:
        """Record how a run ended (``ok``, ``error``, ``timeout``, …) with its summary (redacted),
        after the run's queued read records."""
        self._settled()
        return _runs.finish_run(self._ctx, run_id, status, summary)

    def get_run(self, run_id: str) -> RunRecord | None:
        return _runs.get_run(self._ctx, run_id)

    def list_runs(
        self,
        *,
        limit: int = 50,
        status: str | None = None,
        principal: str | None = None,
        tenant: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        tenants: tuple[str, ...] | None = None,
    ) -> list[RunRecord]:
        """Most recent first; the runs matching every filter given (``since``/``until`` inclusive).

        ``tenants``: the runs of any of these tenants, ordered and limited in one query (what an
        operator console that sees several tenants lists); an empty tuple lists no run."""
        query = RunQuery(
            status=status,
            principal=principal,
            tenant=tenant,
            tenants=tenants,
            since=None if since is None else to_text(since),
            until=None if until is None else to_text(until),
            limit=limit,
        )
        return _runs.list_runs(self._ctx, query)

    def run_values(
        self, column: RunFacet, tenant: str | None = None, *, tenants: tuple[str, ...] | None = None
    ) -> list[str]:
        """Every principal, tenant or status (``column``) that some run has, sorted; with
        ``tenant``, some run of that tenant; with ``tenants``, some run of any of them (what the
        operator console of those tenants may list; an empty tuple: none)."""
        return _runs.run_values(self._ctx, column, tenant, tenants=tenants)

    # ── calls ───────────────────────────────────────────────────────────────────────────────

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
        The arguments are stored redacted (``store_arguments``); the digest binds the real ones.
        """
        return _reservations.reserve(self._ctx, intent, lease_s=lease_s, send=send, durable=durable)

    def record_read(self, read: ReadRecord) -> None:
        """Queue the record of a read-only call that is over; it is written in a batch with
        others, without an fsync, off the caller's path. Never blocks on the store. A crash
        before the batch commits loses the record and nothing else (see :mod:`._deferred`)."""
        self._later.submit(dataclasses.replace(read, completed_at=self._ctx.now()))

    def would_replay(self, intent: CallIntent) -> bool:
        """Whether :meth:`reserve` would answer this keyed call with a replay of its first result.

        Read-only and advisory (the broker uses it to skip asking for consent again for an
        operation that already ran); ``reserve`` still decides, atomically.
        """
        return _reservations.would_replay(self._ctx, intent)

    def mark_denied(self, intent: CallIntent, *, gate: str, reason: str) -> CallRecord:
        """Record a call a gate refused. It is never sent and holds no idempotency key."""
        return _reservations.mark_denied(self._ctx, intent, gate=gate, reason=reason)

    def mark_sent(self, call_id: str, *, lease_s: float | None = None) -> CallRecord:
        """Record that the request goes out now. Call it right before sending; if it raises, don't send.

        Raises :class:`LeaseLostError` when the lease expired meanwhile (the call is then
        ``abandoned`` and another caller may already run the key).
        """
        return _calls.mark_sent(self._ctx, call_id, lease_s)

    def extend_lease(self, call_id: str, lease_s: float) -> CallRecord:
        """Keep a long call's lease alive (reserved or sent, owned by this ledger)."""
        return _calls.extend_lease(self._ctx, call_id, lease_s)

    def complete(
        self,
        call_id: str,
        outcome: Completion,
        *,
        receipt: str | None = None,
        durable: bool = True,
        filtered: Mapping[str, int | bool] | None = None,
    ) -> CallRecord:
        """Record the server's answer: ``ToolResult`` → succeeded; ``ToolError`` or a definite
        ``CallFailed`` (e.g. a client error the server rejected) → failed. Both are replayed to
        later calls with the same key.

        A ``CallFailed`` with ``outcome_unknown=True`` is recorded as :meth:`mark_unknown`.
        Accepted for a ``sent`` call, and for an ``unknown`` one (a late answer settles it).
        ``durable=False`` skips the fsync of this commit: only for calls without side effects.
        ``filtered`` is the result filter's report on the answer (counts and flags only).
        """
        return _calls.complete(
            self._ctx, call_id, outcome, receipt=receipt, durable=durable, filtered=filtered
        )

    def complete_later(
        self,
        call_id: str,
        outcome: ToolResult | ToolError,
        *,
        receipt: str | None = None,
        filtered: Mapping[str, int | bool] | None = None,
    ) -> None:
        """Queue what :meth:`complete` records, to be written batched, without an fsync, off the
        caller's path (``[ledger] durability = "write_ahead"``). Never blocks on the store. A
        crash before it commits leaves the call ``sent``, which recovery makes ``unknown``."""
        self._later.submit(DeferredCompletion(call_id, outcome, receipt, filtered, self._ctx.now()))

    def record_input(self, call_id: str, answer: Mapping[str, Any]) -> CallRecord:
        """Record how the host answered the server's request for input during a sent call
        (``answer``: kind, action, who answered, a digest of the content; stamped with the time).
        The call's state does not change."""
        return _calls.record_input(self._ctx, call_id, answer)

    def mark_refused(self, call_id: str, reason: str, *, retry_after_s: float | None = None) -> CallRecord:
        """The server refused *before executing* (429/503, or it was not reachable at all).

        Frees the key: a later :meth:`reserve` of the same key and arguments is :class:`Fresh`
        (next attempt). ``retry_after_s`` records the server's Retry-After for the backoff.
        """
        return _calls.mark_refused(self._ctx, call_id, reason, retry_after_s)

    def mark_unknown(self, call_id: str, reason: str) -> CallRecord:
        """The request was sent and no answer came (timeout, lost stream, server died mid-call)."""
        return _calls.mark_unknown(self._ctx, call_id, reason)

    def mark_abandoned(self, call_id: str, reason: str) -> CallRecord:
        """A reserved call will not be sent after all (the run was cancelled before sending)."""
        return _calls.mark_abandoned(self._ctx, call_id, reason)

    def release(self, call_id: str) -> None:
        """Give up a call of ours whose outcome could not be recorded (the store was out of
        reach). Nothing is written: the next :meth:`reserve` of its key settles it as
        ``unknown`` (or ``abandoned``, if never sent) at once instead of at lease expiry."""
        self._ctx.released.add(call_id)

    def wait_for(self, call_id: str, timeout_s: float, *, poll_s: float = 0.05) -> CallRecord:
        """Block until ``call_id`` is no longer in flight, or ``timeout_s`` passes.

        Returns the record either way (check ``state``). Commits through this ledger wake it at
        once; commits by other processes are seen within ``poll_s``. A call whose owner died or
        whose lease expired is settled here (``unknown``/``abandoned``), so waiters never hang
        on a crashed broker.
        """
        return _calls.wait_for(self._ctx, call_id, timeout_s, poll_s)

    # ── reconciliation ──────────────────────────────────────────────────────────────────────

    def unknown_calls(self) -> list[CallRecord]:
        """Calls whose outcome is unknown, oldest first: each needs a human or a read-back."""
        return _queries.unknown_calls(self._ctx)

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
        return _calls.resolve(
            self._ctx, call_id, resolution, evidence, receipt=receipt, result=result, resolved_by=resolved_by
        )

    # ── approvals ───────────────────────────────────────────────────────────────────────────

    def record_approval(self, approval: ApprovalRecord) -> ApprovalRecord:
        """Store an issued approval (unused). Its id must be new."""
        return _approvals.record_approval(self._ctx, approval)

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return _approvals.get_approval(self._ctx, approval_id)

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
        than ``risk`` (in the policy's order, ``low`` < ``medium`` < ``high``).
        """
        claim = _approvals.ApprovalClaim(
            call_id=call_id,
            tenant=tenant,
            principal=principal,
            server=server,
            tool=tool,
            args_digest=args_digest,
            risk=risk,
        )
        return _approvals.consume_approval(self._ctx, approval_id, claim, now)

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
        moment = to_text(usable_at if usable_at is not None else self._ctx.now())
        query = ApprovalQuery(
            tenant=tenant,
            principal=principal,
            server=server,
            tool=tool,
            args_digest=args_digest,
            usable_at=moment,
        )
        return _approvals.find_approvals(self._ctx, query)

    # ── MCP sessions ────────────────────────────────────────────────────────────────────────

    def bind_session(self, session_id: str, *, principal: str, tenant: str) -> SessionBinding:
        """Record that ``principal`` in ``tenant`` opened the MCP session ``session_id`` (stored
        as a digest). Once only: binding it again to the same caller returns the binding, to
        another raises :class:`LedgerStateError`."""
        return _sessions.bind_session(self._ctx, session_id, principal, tenant)

    def session_binding(self, session_id: str) -> SessionBinding | None:
        """Who opened the MCP session ``session_id``; None if no one bound it (in any replica)."""
        return _sessions.get_session(self._ctx, session_id)

    # ── plans ───────────────────────────────────────────────────────────────────────────────

    def record_plan(self, plan: PlanRecord) -> PlanRecord:
        """Store a dry run's plan, once (a second plan with its id raises LedgerStateError)."""
        return _plans.record_plan(self._ctx, plan)

    def approve_plan(
        self, plan_id: str, *, digest: str, approver: str, expires_at: datetime, note: str | None = None
    ) -> PlanRecord:
        """Approve a recorded plan once, bound to ``digest`` (see :class:`PlanRecord`), until
        ``expires_at`` (at most the plan's own expiry). Refused when it is unknown, expired,
        revoked or approved already (LedgerStateError, with the reason)."""
        return _plans.approve_plan(
            self._ctx, plan_id, digest=digest, approver=approver, expires_at=expires_at, note=note
        )

    def revoke_plan(self, plan_id: str) -> PlanRecord:
        """Revoke a plan: no run uses it from now on (revoking twice changes nothing)."""
        return _plans.revoke_plan(self._ctx, plan_id)

    def get_plan(self, plan_id: str) -> PlanRecord | None:
        """The plan ``plan_id`` as it was recorded; None if no process recorded it."""
        return _plans.get_plan(self._ctx, plan_id)

    def list_plans(self, *, tenants: Sequence[str] | None = None, limit: int = 100) -> list[PlanRecord]:
        """The newest ``limit`` plans of ``tenants`` (None: every tenant), newest first."""
        return _plans.list_plans(self._ctx, tenants=tenants, limit=limit)

    # ── skills (issue 41) ───────────────────────────────────────────────────────────────────

    @property
    def skills(self) -> SkillBook:
        """The tenants' saved skills and their versions (see :mod:`codemode.ledger._skills`)."""
        return SkillBook(self._ctx)

    @property
    def workspaces(self) -> WorkspaceBook:
        """Workspaces' owners, live versions, sizes and last uses; their files stay in a directory
        (see :mod:`codemode.ledger._workspaces`)."""
        return WorkspaceBook(self._ctx)

    @property
    def approval_tickets(self) -> ApprovalTicketBook:
        """Calls waiting for an operator's approval, shared by every serve replica on the ledger
        (see :mod:`codemode.ledger._tickets`)."""
        return ApprovalTicketBook(self._ctx)

    @property
    def sandbox_sessions(self) -> SandboxSessionBook:
        """Which ``serve`` replica holds each open sandbox session (see
        :mod:`codemode.ledger._sandbox_sessions`)."""
        return SandboxSessionBook(self._ctx)

    # ── quotas (issue 42) ───────────────────────────────────────────────────────────────────

    @property
    def quotas(self) -> QuotaBook:
        """Quota counters and run slots (see :mod:`codemode.ledger._quotas`)."""
        return QuotaBook(self._ctx)

    @property
    def input_rounds(self) -> InputRoundBook:
        """Stateless clients' input rounds, relayed between serve replicas (see
        :mod:`codemode.ledger._input_rounds`)."""
        return InputRoundBook(self._ctx)

    # ── queries ─────────────────────────────────────────────────────────────────────────────

    def get_call(self, call_id: str) -> CallRecord | None:
        self._settled()
        return _queries.get_call(self._ctx, call_id)

    def list_calls(
        self,
        *,
        run_id: str | None = None,
        state: CallState | None = None,
        limit: int = 100,
        newest_first: bool = True,
    ) -> list[CallRecord]:
        self._settled()
        return _queries.list_calls(
            self._ctx, run_id=run_id, state=state, limit=limit, newest_first=newest_first
        )

    def find_by_receipt(self, receipt: str) -> list[CallRecord]:
        """Calls whose side effect carries this external receipt id."""
        self._settled()
        return _queries.find_by_receipt(self._ctx, receipt)

    def compensations_of(self, call_ids: Iterable[str]) -> list[CallRecord]:
        """Every call made to undo one of ``call_ids`` (each attempt, denied ones too), oldest first."""
        self._settled()
        return _queries.compensations_of(self._ctx, frozenset(call_ids))

    def gives_receipts(self, server: str) -> bool:
        """Whether any answer of ``server`` in this ledger carried a receipt (one given when
        reconciling does not count): the evidence chain expects one of a write only to a
        server known to give them."""
        self._settled()
        return _queries.gives_receipts(self._ctx, server)

    def events(self, subject: str | None = None, *, limit: int | None = None) -> list[LedgerEvent]:
        """The event log (oldest first), optionally only one call's, run's or approval's events."""
        self._settled()
        return _queries.events(self._ctx, subject, limit)

    def head(self) -> tuple[int, str]:
        """``(seq, hash)`` of the last event: record it elsewhere to anchor a later ``verify``."""
        self._settled()
        return _queries.head(self._ctx)

    # ── integrity and recovery ──────────────────────────────────────────────────────────────

    def verify(self, *, anchor: tuple[int, str] | None = None, archive: Path | None = None) -> VerifyReport:
        """Re-check the whole chain and re-derive every table from the events; see :mod:`._verify`.

        ``archive``: the directory of the segments ``codemode ledger archive`` wrote, read before
        the database so that the archived prefix is checked too (without it, it is not)."""
        self._settled()
        with self._store.transaction(write=False) as tx:
            if archive is None:
                return verify_store(tx, anchor=anchor)
            boundary = tx.archived()
            reader = ArchiveReader(archive, tx.ledger_id() or "", 0 if boundary is None else boundary[0])
            report = verify_store(tx, anchor=anchor, archive=reader.events())
        problems = (*reader.problems, *report.problems)
        return report.model_copy(update={"ok": not problems, "problems": problems})

    def recover(self) -> RecoveryReport:
        """Settle what a vanished broker left behind (runs automatically on open).

        A call ``sent`` by a process that is gone (or whose lease expired) becomes
        ``unknown``: the broker died between send and commit, so the server may have executed
        it. A ``reserved`` one becomes ``abandoned`` (it was never sent; safe to retry). A
        ``running`` run of a vanished process becomes ``interrupted``.
        """
        return _leases.recover(self._ctx)


if TYPE_CHECKING:
    # pyright proves here that StoreLedger implements the Ledger protocol.
    _protocol_check: Ledger = cast(StoreLedger, None)
