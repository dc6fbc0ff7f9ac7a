"""Approvals: stored once, consumed once, atomically, by exactly the call they were issued for."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from codemode.config import RISK_ORDER
from codemode.ledger._context import LedgerContext, stored_text
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._events import emit
from codemode.ledger._models import ApprovalConsumed, ApprovalRecord, ApprovalRefused, ApprovalUse
from codemode.ledger._records import approval_record
from codemode.ledger._reduce import Row
from codemode.ledger._time import to_text
from codemode.ledger.stores import ApprovalQuery


@dataclass(frozen=True, slots=True)
class ApprovalClaim:
    """What a call that wants to use an approval is: it must match the approval exactly."""

    call_id: str
    tenant: str
    principal: str
    server: str
    tool: str
    args_digest: str
    risk: str | None


def record_approval(ctx: LedgerContext, approval: ApprovalRecord) -> ApprovalRecord:
    if approval.used_at is not None or approval.used_by_call is not None:
        raise LedgerStateError("record_approval takes an unused approval")
    fields = {
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
        "note": None if approval.note is None else stored_text(approval.note),
    }
    with ctx.write() as tx:
        row = emit(ctx, tx, "approval_recorded", approval.approval_id, fields)
    return approval_record(row)


def get_approval(ctx: LedgerContext, approval_id: str) -> ApprovalRecord | None:
    with ctx.read() as tx:
        row = tx.row("approvals", approval_id)
    return None if row is None else approval_record(row)


def _mismatch(row: Row, claim: ApprovalClaim, now: str) -> str | None:
    if row["used_at"] is not None:
        return f"already used at {row['used_at']} by call {row['used_by_call']}; approvals are single-use"
    if str(row["expires_at"]) <= now:
        return f"expired at {row['expires_at']}"
    if (row["tenant"], row["principal"]) != (claim.tenant, claim.principal):
        return "issued for another tenant or principal"
    if (row["server"], row["tool"]) != (claim.server, claim.tool):
        return f"issued for {row['server']}/{row['tool']}, not {claim.server}/{claim.tool}"
    if row["call_id"] is not None and row["call_id"] != claim.call_id:
        return f"bound to call {row['call_id']}, not {claim.call_id}"
    if row["args_digest"] != claim.args_digest:
        return "issued for other arguments (the argument digest differs)"
    if claim.risk is not None and row["risk"] != claim.risk:
        # The one risk order is the policy's (low < medium < high); an unknown level never covers.
        granted, needed = RISK_ORDER.get(str(row["risk"])), RISK_ORDER.get(claim.risk)
        if granted is None or needed is None or granted < needed:
            return f"approved at risk {row['risk']}, the call is {claim.risk}"
    return None


def consume_approval(
    ctx: LedgerContext, approval_id: str, claim: ApprovalClaim, now: datetime | None
) -> ApprovalUse:
    with ctx.write() as tx:
        row = tx.row("approvals", approval_id)
        if row is None:
            return ApprovalRefused(approval_id=approval_id, reason="no such approval")
        moment = to_text(now if now is not None else ctx.now())
        why = _mismatch(row, claim, moment)
        if why is not None:
            return ApprovalRefused(approval_id=approval_id, reason=why)
        used = {"used_at": moment, "used_by_call": claim.call_id}
        new = emit(ctx, tx, "approval_consumed", approval_id, used, current=row)
    return ApprovalConsumed(approval=approval_record(new))


def find_approvals(ctx: LedgerContext, query: ApprovalQuery) -> list[ApprovalRecord]:
    with ctx.read() as tx:
        rows = tx.approvals(query)
    return [approval_record(r) for r in rows]
