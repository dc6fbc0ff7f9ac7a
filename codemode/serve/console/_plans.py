"""Dry runs' plans in the console: the list, one plan whole, and its answer (blocking: call from
a thread).

An operator sees and answers only the plans of the tenants in their :class:`TenantScope`; a plan
of another tenant is answered exactly like one that is not there. An approval goes through the
ledger's ``approve_plan``, as ``codemode approve --plan`` does: bound to the digest the page
showed (the code's digest and each planned call's tool, argument digest and occurrence), until
an expiry, with the operator as approver. A refusal is ``revoke_plan``, as ``--revoke``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from codemode._text import escape_invisible
from codemode.broker import PlannedCall, summarize_arguments
from codemode.engine import Plan
from codemode.ledger import LedgerStateError, PlanRecord, StoreLedger
from codemode.serve.console._desk import DeskError
from codemode.serve.console._scope import TenantScope

PlanState = Literal["pending", "approved", "expired", "revoked"]
PLAN_STATES: tuple[PlanState, ...] = ("pending", "approved", "expired", "revoked")
MAX_PLANS = 200
APPROVAL_TTLS = {"10m": timedelta(minutes=10), "1h": timedelta(hours=1), "24h": timedelta(hours=24)}
"""How long a console approval lasts (the first is ``codemode approve --plan``'s default); the
ledger cuts it at the plan's own expiry."""
ARGUMENTS_SHOWN = 4000


def plan_state(record: PlanRecord, now: datetime) -> PlanState:
    if record.revoked_at is not None:
        return "revoked"
    if record.approved_at is not None and record.approval_expires_at is not None:
        return "approved" if record.approval_expires_at > now else "expired"
    return "pending" if record.expires_at > now else "expired"


@dataclass(frozen=True)
class ShownCall:
    """A planned call as the page shows it: its arguments as safe text (secrets hidden,
    invisible characters escaped; the template escapes HTML)."""

    call: PlannedCall
    arguments: str


@dataclass(frozen=True)
class PlanView:
    record: PlanRecord
    plan: Plan
    state: PlanState

    @property
    def code(self) -> str:
        return escape_invisible(self.plan.code)

    @property
    def calls(self) -> list[ShownCall]:
        return [
            ShownCall(call, summarize_arguments(dict(call.arguments), limit=ARGUMENTS_SHOWN))
            for call in self.plan.calls
        ]


def _view(record: PlanRecord, now: datetime) -> PlanView:
    return PlanView(record, Plan.from_record(record), plan_state(record, now))


def list_plans(ledger: StoreLedger, scope: TenantScope, state: str = "") -> list[PlanView]:
    """The newest plans of the tenants in ``scope``, of one ``state`` (empty: any)."""
    tenants = None if scope.every else tuple(scope.names())
    now = datetime.now(UTC)
    views = [_view(record, now) for record in ledger.list_plans(tenants=tenants, limit=MAX_PLANS)]
    return [view for view in views if not state or view.state == state]


def plan_detail(ledger: StoreLedger, plan_id: str, scope: TenantScope) -> PlanView | None:
    """The plan whole; None when the ledger has no such plan or it is another tenant's (so a
    plan outside the scope looks exactly like a missing one)."""
    record = ledger.get_plan(plan_id)
    if record is None or not scope.sees(record.tenant):
        return None
    return _view(record, datetime.now(UTC))


def _scoped(ledger: StoreLedger, plan_id: str, scope: TenantScope) -> PlanRecord:
    record = ledger.get_plan(plan_id)
    if record is None or not scope.sees(record.tenant):
        raise DeskError(404, f"the ledger has no plan {plan_id!r}: pick a plan from the list.")
    return record


def approve_plan(
    ledger: StoreLedger, plan_id: str, digest: str, *, ttl: timedelta, operator: str, scope: TenantScope
) -> PlanRecord:
    """Approve the plan the operator saw (``digest``: the approval digest their page showed)."""
    _scoped(ledger, plan_id, scope)
    try:
        return ledger.approve_plan(
            plan_id,
            digest=digest,
            approver=f"console:{operator}",
            expires_at=datetime.now(UTC) + ttl,
            note=f"approved by operator {operator} in the console",
        )
    except LedgerStateError as exc:
        raise DeskError(409, f"{exc}. Reload the plan to see where it stands now.") from None


def revoke_plan(ledger: StoreLedger, plan_id: str, *, scope: TenantScope) -> PlanRecord:
    """Refuse (revoke) the plan: no run uses it from now on, approved or not."""
    _scoped(ledger, plan_id, scope)
    return ledger.revoke_plan(plan_id)
