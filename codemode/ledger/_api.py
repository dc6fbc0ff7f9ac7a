"""What the broker and the CLI need from a ledger.

:class:`codemode.ledger.StoreLedger` implements it on any :class:`codemode.ledger.LedgerStore`
(:mod:`.stores`), and :class:`codemode.ledger.SqliteLedger` is that on SQLite. A backend
(SQLite, PostgreSQL, a new one) implements the small store Protocol, not this one: the rules
(state machine, idempotency, leases, hash chain, verify, recovery) stay in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from codemode.calls import RunBinding, ToolError, ToolResult
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
    VerifyReport,
)
from codemode.ledger._plans import PlanRecord
from codemode.ledger._quotas import QuotaBook
from codemode.ledger._reads import ReadRecord
from codemode.ledger.stores import RunFacet


class Ledger(Protocol):
    """Runs, calls, approvals and receipts, hash-chained. Methods block; see ``StoreLedger``."""

    # runs
    def begin_run(self, binding: RunBinding, code_digest: str) -> RunRecord: ...
    def finish_run(self, run_id: str, status: str, summary: Mapping[str, Any] | None = None) -> RunRecord: ...
    def get_run(self, run_id: str) -> RunRecord | None: ...
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
    ) -> list[RunRecord]: ...
    def run_values(
        self, column: RunFacet, tenant: str | None = None, *, tenants: tuple[str, ...] | None = None
    ) -> list[str]: ...

    # calls
    def reserve(
        self, intent: CallIntent, *, lease_s: float | None = None, send: bool = False, durable: bool = True
    ) -> Reservation: ...
    def record_read(self, read: ReadRecord) -> None: ...
    def complete_later(
        self,
        call_id: str,
        outcome: ToolResult | ToolError,
        *,
        receipt: str | None = None,
        filtered: Mapping[str, int | bool] | None = None,
    ) -> None: ...
    def would_replay(self, intent: CallIntent) -> bool: ...
    def mark_denied(self, intent: CallIntent, *, gate: str, reason: str) -> CallRecord: ...
    def mark_sent(self, call_id: str, *, lease_s: float | None = None) -> CallRecord: ...
    def extend_lease(self, call_id: str, lease_s: float) -> CallRecord: ...
    def complete(
        self,
        call_id: str,
        outcome: Completion,
        *,
        receipt: str | None = None,
        durable: bool = True,
        filtered: Mapping[str, int | bool] | None = None,
    ) -> CallRecord: ...
    def record_input(self, call_id: str, answer: Mapping[str, Any]) -> CallRecord: ...
    def mark_refused(
        self, call_id: str, reason: str, *, retry_after_s: float | None = None
    ) -> CallRecord: ...
    def mark_unknown(self, call_id: str, reason: str) -> CallRecord: ...
    def mark_abandoned(self, call_id: str, reason: str) -> CallRecord: ...
    def release(self, call_id: str) -> None: ...
    def wait_for(self, call_id: str, timeout_s: float, *, poll_s: float = 0.05) -> CallRecord: ...

    # reconciliation
    def unknown_calls(self) -> list[CallRecord]: ...
    def resolve(
        self,
        call_id: str,
        resolution: Resolution,
        evidence: str,
        *,
        receipt: str | None = None,
        result: Any = None,
        resolved_by: str = "manual",
    ) -> CallRecord: ...

    # approvals
    def record_approval(self, approval: ApprovalRecord) -> ApprovalRecord: ...
    def get_approval(self, approval_id: str) -> ApprovalRecord | None: ...
    def find_approvals(
        self,
        *,
        tenant: str,
        principal: str,
        server: str,
        tool: str,
        args_digest: str,
        usable_at: datetime | None = None,
    ) -> list[ApprovalRecord]: ...
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
    ) -> ApprovalUse: ...

    # plans (a dry run's planned calls)
    def record_plan(self, plan: PlanRecord) -> PlanRecord: ...
    def get_plan(self, plan_id: str) -> PlanRecord | None: ...
    def approve_plan(
        self, plan_id: str, *, digest: str, approver: str, expires_at: datetime, note: str | None = None
    ) -> PlanRecord: ...
    def revoke_plan(self, plan_id: str) -> PlanRecord: ...

    # quotas (issue 42)
    @property
    def quotas(self) -> QuotaBook: ...

    # queries, integrity
    def get_call(self, call_id: str) -> CallRecord | None: ...
    def list_calls(
        self,
        *,
        run_id: str | None = None,
        state: CallState | None = None,
        limit: int = 100,
        newest_first: bool = True,
    ) -> list[CallRecord]: ...
    def find_by_receipt(self, receipt: str) -> list[CallRecord]: ...
    def gives_receipts(self, server: str) -> bool: ...
    def compensations_of(self, call_ids: Iterable[str]) -> list[CallRecord]: ...
    def events(self, subject: str | None = None, *, limit: int | None = None) -> list[LedgerEvent]: ...
    def head(self) -> tuple[int, str]: ...
    def verify(self, *, anchor: tuple[int, str] | None = None) -> VerifyReport: ...
    def recover(self) -> RecoveryReport: ...
    def close(self) -> None: ...
