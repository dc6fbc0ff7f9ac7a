"""Plans: what a dry run would do, stored once so that any process sharing the ledger finds it.

A plan is written by the dry run that made it (``codemode run --plan``) and never changes: a
person approves exactly what they were shown. Its calls and reads are kept as canonical JSON (the
ledger knows nothing of the broker's types); their meaning is the broker's
(``codemode.broker.PlannedCall``). The arguments in them are as the program passed them, with
secrets already hidden.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from codemode.catalog import canonical_json
from codemode.ledger._context import LedgerContext, stored_text
from codemode.ledger._digest import sha256_text
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._events import emit
from codemode.ledger._records import opt_time
from codemode.ledger._reduce import Row
from codemode.ledger._time import from_text, to_text


@dataclass(frozen=True)
class PlanRecord:
    plan_id: str
    run_id: str
    """The dry run that made it."""
    principal: str
    tenant: str
    code_digest: str
    code: str
    """The program, as a person reviews it (secrets hidden by the ledger)."""
    calls: tuple[Mapping[str, Any], ...]
    reads: tuple[Mapping[str, Any], ...]
    created_at: datetime
    expires_at: datetime
    approved_digest: str | None = None
    """What the approval binds: a digest of the code's digest and of every planned call's tool,
    argument digest and occurrence (``codemode.engine`` computes it)."""
    approved_by: str | None = None
    approved_at: datetime | None = None
    approval_expires_at: datetime | None = None
    approval_note: str | None = None
    revoked_at: datetime | None = None


_CODE_CHARS = 1_000_000
"""A program longer than this is kept cut (its digest is what binds it, not this text)."""


def plan_digest(code_digest: str, calls: Sequence[Mapping[str, Any]]) -> str:
    """What a plan's approval binds: the code's digest and, per planned call in order, its
    server, tool, argument digest and occurrence (``sha256:<hex>``)."""
    bound = [code_digest, *([c["server"], c["tool"], c["args_digest"], c["occurrence"]] for c in calls)]
    return sha256_text(canonical_json(bound))


def _json_list(items: Sequence[Mapping[str, Any]]) -> str:
    return canonical_json([dict(item) for item in items]).decode("utf-8")


def _plan_record(row: Row) -> PlanRecord:
    calls = cast(list[dict[str, Any]], json.loads(str(row["calls_json"])))
    reads = cast(list[dict[str, Any]], json.loads(str(row["reads_json"])))
    return PlanRecord(
        plan_id=str(row["plan_id"]),
        run_id=str(row["run_id"]),
        principal=str(row["principal"]),
        tenant=str(row["tenant"]),
        code_digest=str(row["code_digest"]),
        code=str(row["code"]),
        calls=tuple(calls),
        reads=tuple(reads),
        created_at=from_text(str(row["created_at"])),
        expires_at=from_text(str(row["expires_at"])),
        approved_digest=cast("str | None", row["approved_digest"]),
        approved_by=cast("str | None", row["approved_by"]),
        approved_at=opt_time(row["approved_at"]),
        approval_expires_at=opt_time(row["approval_expires_at"]),
        approval_note=cast("str | None", row["approval_note"]),
        revoked_at=opt_time(row["revoked_at"]),
    )


def record_plan(ctx: LedgerContext, plan: PlanRecord) -> PlanRecord:
    if plan.expires_at <= plan.created_at:
        raise LedgerStateError(f"plan {plan.plan_id}: it must expire after it is created")
    if plan.approved_at is not None or plan.revoked_at is not None:
        raise LedgerStateError(f"plan {plan.plan_id}: a plan is recorded unapproved (approve_plan approves)")
    fields = {
        "plan_id": plan.plan_id,
        "run_id": plan.run_id,
        "principal": plan.principal,
        "tenant": plan.tenant,
        "code_digest": plan.code_digest,
        "code": stored_text(plan.code, limit=_CODE_CHARS),
        "calls_json": _json_list(plan.calls),
        "reads_json": _json_list(plan.reads),
        "created_at": to_text(plan.created_at),
        "expires_at": to_text(plan.expires_at),
    }
    with ctx.write() as tx:
        row = emit(ctx, tx, "plan_recorded", plan.plan_id, fields)
    return _plan_record(row)


def approve_plan(
    ctx: LedgerContext, plan_id: str, *, digest: str, approver: str, expires_at: datetime, note: str | None
) -> PlanRecord:
    """Approve the plan once, bound to ``digest`` (:func:`plan_digest` of what was shown).

    Refused (LedgerStateError, with the reason) when it is unknown, revoked, approved already,
    expired, or its digest is not ``digest``."""
    with ctx.write() as tx:
        row = tx.row("plans", plan_id)
        if row is None:
            raise LedgerStateError(f"no plan {plan_id} in this ledger")
        now = to_text(ctx.now())
        if str(row["expires_at"]) <= now:
            raise LedgerStateError(f"plan {plan_id} expired at {row['expires_at']}; make a new one")
        if row["revoked_at"] is not None:
            raise LedgerStateError(f"plan {plan_id} was revoked at {row['revoked_at']}")
        if row["approved_at"] is not None:
            raise LedgerStateError(f"plan {plan_id} was approved already, by {row['approved_by']}")
        if digest != plan_digest(str(row["code_digest"]), json.loads(str(row["calls_json"]))):
            raise LedgerStateError(f"plan {plan_id} is not the plan that was shown (its digest differs)")
        fields = {
            "approved_digest": digest,
            "approved_by": approver,
            "approved_at": now,
            # Never past the plan's own expiry: the reads it rests on age.
            "approval_expires_at": min(to_text(expires_at), str(row["expires_at"])),
            "approval_note": None if note is None else stored_text(note),
        }
        new = emit(ctx, tx, "plan_approved", plan_id, fields, current=row)
    return _plan_record(new)


def revoke_plan(ctx: LedgerContext, plan_id: str) -> PlanRecord:
    """Revoke the plan (approved or not): no run uses it from now on."""
    with ctx.write() as tx:
        row = tx.row("plans", plan_id)
        if row is None:
            raise LedgerStateError(f"no plan {plan_id} in this ledger")
        if row["revoked_at"] is not None:
            return _plan_record(row)
        new = emit(ctx, tx, "plan_revoked", plan_id, {"revoked_at": to_text(ctx.now())}, current=row)
    return _plan_record(new)


def list_plans(ctx: LedgerContext, *, tenants: Sequence[str] | None, limit: int) -> list[PlanRecord]:
    """The newest ``limit`` plans of ``tenants`` (None: every tenant), newest first."""
    with ctx.read() as tx:
        # A scan, as for skills: plans are made by people's dry runs, not by the million, and
        # the store Protocol stays unchanged.
        rows = [row for row in tx.rows("plans") if tenants is None or row["tenant"] in tenants]
    rows.sort(key=lambda row: (str(row["created_at"]), str(row["plan_id"])), reverse=True)
    return [_plan_record(row) for row in rows[:limit]]


def get_plan(ctx: LedgerContext, plan_id: str) -> PlanRecord | None:
    with ctx.read() as tx:
        row = tx.row("plans", plan_id)
    return None if row is None else _plan_record(row)
