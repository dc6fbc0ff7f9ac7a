"""After ``reserve``: sending, answers, refusals, unknown outcomes, waiting and reconciling.

Each operation checks its precondition with :func:`._states.sources` of the event it writes,
so the states it accepts are exactly the ones the state machine (and ``verify``) allows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from codemode.calls import CallFailed, ToolError, ToolResult
from codemode.catalog import canonical_json
from codemode.ledger._context import LedgerContext, stored_text
from codemode.ledger._errors import LeaseLostError, LedgerStateError
from codemode.ledger._events import emit
from codemode.ledger._leases import abandoned_fields, expire, lease_live, lease_lost, unknown_fields
from codemode.ledger._models import CallRecord, Completion, Resolution
from codemode.ledger._records import call_record
from codemode.ledger._reduce import Row
from codemode.ledger._states import IN_FLIGHT, sources
from codemode.ledger._stored import stored_outcome
from codemode.ledger._time import later, to_text
from codemode.ledger.stores import StoreTransaction


def in_state(row: Row | None, call_id: str, kind: str, action: str) -> Row:
    """``row`` if the event ``kind`` may apply to it; otherwise a :class:`LedgerStateError`."""
    if row is None:
        raise LedgerStateError(f"no call {call_id!r} in the ledger")
    states = sources(kind)
    if row["state"] not in states:
        raise LedgerStateError(
            f"cannot {action} call {call_id}: it is {row['state']} (needs {' or '.join(sorted(states))})"
        )
    return row


def _require(tx: StoreTransaction, call_id: str, kind: str, action: str) -> Row:
    return in_state(tx.row("calls", call_id), call_id, kind, action)


def mark_sent(ctx: LedgerContext, call_id: str, lease_s: float | None) -> CallRecord:
    lease = ctx.lease_s if lease_s is None else lease_s
    # A lease that dies between this commit and the send (a stalled process) is caught the
    # other way round: the late complete() is accepted and the key shows the call as unknown.
    with ctx.write() as tx:
        now = ctx.now()
        row = tx.row("calls", call_id)
        if row is not None and row["state"] == "abandoned" and row["owner"] == ctx.owner:
            # Someone settled our expired lease already; the caller must treat it the same way.
            raise LeaseLostError(f"cannot send call {call_id}: {row['reason']}")
        row = in_state(row, call_id, "call_sent", "mark as sent")
        lost = lease_lost(ctx, tx, row, now, "send")
        if lost is None:
            stamp = to_text(now)
            sent = {
                "state": "sent",
                "sent_at": stamp,
                "lease_expires_at": later(now, lease),
                "updated_at": stamp,
            }
            row = emit(ctx, tx, "call_sent", call_id, sent, current=row)
    if lost is not None:
        raise lost
    return call_record(row)


def extend_lease(ctx: LedgerContext, call_id: str, lease_s: float) -> CallRecord:
    with ctx.write() as tx:
        now = ctx.now()
        row = _require(tx, call_id, "lease_extended", "extend the lease of")
        lost = lease_lost(ctx, tx, row, now, "extend the lease of")
        if lost is None:
            extended = {"lease_expires_at": later(now, lease_s), "updated_at": to_text(now)}
            row = emit(ctx, tx, "lease_extended", call_id, extended, current=row)
    if lost is not None:
        raise lost
    return call_record(row)


def complete(
    ctx: LedgerContext,
    call_id: str,
    outcome: Completion,
    *,
    receipt: str | None,
    durable: bool,
    filtered: Mapping[str, int | bool] | None = None,
) -> CallRecord:
    if isinstance(outcome, CallFailed) and outcome.outcome_unknown:
        return mark_unknown(ctx, call_id, outcome.reason)
    with ctx.write(durable=durable) as tx:
        new = complete_in(ctx, tx, call_id, outcome, receipt=receipt, filtered=filtered)
    return call_record(new)


def complete_in(
    ctx: LedgerContext,
    tx: StoreTransaction,
    call_id: str,
    outcome: ToolResult | ToolError | CallFailed,
    *,
    receipt: str | None,
    filtered: Mapping[str, int | bool] | None,
    at: datetime | None = None,
) -> Row:
    """The ``call_completed`` event of :func:`complete`, inside the caller's transaction (``at``:
    when the answer came, if not now)."""
    state = "succeeded" if isinstance(outcome, ToolResult) else "failed"
    fields = stored_outcome(outcome, ctx.max_result_bytes)
    row = _require(tx, call_id, "call_completed", "complete")
    stamp = to_text(at or ctx.now())
    fields |= {
        "state": state,
        "receipt": receipt,
        "filter_json": None if filtered is None else canonical_json(dict(filtered)).decode(),
        "completed_at": stamp,
        "lease_expires_at": None,
        "updated_at": stamp,
    }
    if row["state"] == "unknown":
        fields["resolved_by"] = "late answer"
    return emit(ctx, tx, "call_completed", call_id, fields, current=row)


def record_input(ctx: LedgerContext, call_id: str, answer: Mapping[str, Any]) -> CallRecord:
    with ctx.write() as tx:
        row = _require(tx, call_id, "call_input_answered", "record an input answer for")
        stamp = to_text(ctx.now())
        answers: list[Any] = json.loads(str(row["inputs_json"])) if row["inputs_json"] else []
        answers.append({**answer, "at": stamp})
        fields = {"inputs_json": canonical_json(answers).decode(), "updated_at": stamp}
        new = emit(ctx, tx, "call_input_answered", call_id, fields, current=row)
    return call_record(new)


def mark_refused(ctx: LedgerContext, call_id: str, reason: str, retry_after_s: float | None) -> CallRecord:
    with ctx.write() as tx:
        row = _require(tx, call_id, "call_refused", "mark as refused")
        now = ctx.now()
        stamp = to_text(now)
        refused = {
            "state": "refused",
            "reason": stored_text(reason),
            "retry_after": None if retry_after_s is None else later(now, retry_after_s),
            "completed_at": stamp,
            "lease_expires_at": None,
            "updated_at": stamp,
        }
        new = emit(ctx, tx, "call_refused", call_id, refused, current=row)
    return call_record(new)


def mark_unknown(ctx: LedgerContext, call_id: str, reason: str) -> CallRecord:
    with ctx.write() as tx:
        row = _require(tx, call_id, "call_unknown", "mark as unknown")
        fields = unknown_fields(stored_text(reason), to_text(ctx.now()))
        new = emit(ctx, tx, "call_unknown", call_id, fields, current=row)
    return call_record(new)


def mark_abandoned(ctx: LedgerContext, call_id: str, reason: str) -> CallRecord:
    with ctx.write() as tx:
        row = _require(tx, call_id, "call_abandoned", "abandon")
        fields = abandoned_fields(stored_text(reason), to_text(ctx.now()))
        new = emit(ctx, tx, "call_abandoned", call_id, fields, current=row)
    return call_record(new)


def wait_for(ctx: LedgerContext, call_id: str, timeout_s: float, poll_s: float) -> CallRecord:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = ctx.store.commits()  # before the read: a commit after it wakes the wait below
        with ctx.read() as tx:
            row = tx.row("calls", call_id)
        if row is None:
            raise LedgerStateError(f"no call {call_id!r} in the ledger")
        if row["state"] not in IN_FLIGHT:
            return call_record(row)
        if not lease_live(ctx, row, ctx.now()):
            with ctx.write() as tx:  # settle it, unless that happened meanwhile
                current = tx.row("calls", call_id)
                now = ctx.now()
                if (
                    current is not None
                    and current["state"] in IN_FLIGHT
                    and not lease_live(ctx, current, now)
                ):
                    expire(ctx, tx, current, now)
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return call_record(row)
        ctx.store.wait_for_commit(seen, min(poll_s, remaining))


def resolve(
    ctx: LedgerContext,
    call_id: str,
    resolution: Resolution,
    evidence: str,
    *,
    receipt: str | None,
    result: Any,
    resolved_by: str,
) -> CallRecord:
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
    fields = stored_outcome(stored, ctx.max_result_bytes)
    with ctx.write() as tx:
        row = _require(tx, call_id, "call_reconciled", "reconcile")
        stamp = to_text(ctx.now())
        fields |= {
            "state": f"reconciled_{resolution}",
            "evidence": stored_text(evidence),
            "resolved_by": resolved_by,
            "receipt": receipt if receipt is not None else row["receipt"],
            "completed_at": stamp,
            "updated_at": stamp,
        }
        new = emit(ctx, tx, "call_reconciled", call_id, fields, current=row)
    return call_record(new)
