"""A dry run's plan as the engine returns it, and how it is kept in the ledger.

:meth:`CodeMode.plan` runs a program in plan mode (see ``codemode.broker.Planner``): reads are
sent, every other call is planned instead. What it returns is a :class:`Plan`: the planned calls
with their risks and argument digests, the reads it made, the program's digest and who ran it,
and the dry run's own result. The plan is stored in the ledger at once, so that any process
sharing the ledger (``codemode approve --plan``, a later ``codemode run``) finds it by its id.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import anyio

from codemode._text import escape_invisible
from codemode.broker import ApprovedPlan, PlannedCall, PlannedRead, Planner, summarize_arguments
from codemode.engine._run_result import RunResult
from codemode.errors import PlanRefusedError
from codemode.ledger import Ledger, PlanRecord, plan_digest

PLAN_TTL_S = 24 * 3600.0
"""How long a plan stays usable by default: long enough for a person to review it, short enough
that the reads it rests on have not long gone stale."""


def code_digest(code: str) -> str:
    """The program's digest, as its run records it (a plan binds the same)."""
    return hashlib.sha256(code.encode()).hexdigest()


@dataclass(frozen=True)
class Plan:
    """What a program would do: the calls a dry run planned instead of sending, and its reads."""

    plan_id: str
    run_id: str
    principal: str
    tenant: str
    code_digest: str
    code: str
    """The program (as the ledger keeps it: secrets hidden), for the person who approves it."""
    calls: tuple[PlannedCall, ...]
    reads: tuple[PlannedRead, ...]
    created_at: datetime
    expires_at: datetime
    result: RunResult | None = None
    """The dry run's own result (None for a plan read back from the ledger)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "run_id": self.run_id,
            "principal": self.principal,
            "tenant": self.tenant,
            "code_digest": self.code_digest,
            "approval_digest": self.digest,
            "calls": [call.as_json() for call in self.calls],
            "reads": [read.as_json() for read in self.reads],
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
        }

    def as_text(self) -> str:
        """The plan for a model or a person reading plain text: each planned call, the reads made,
        and what to do next."""
        lines = [f"plan {self.plan_id}: {len(self.calls)} planned calls, {len(self.reads)} reads made"]
        for call in self.calls:
            arguments = summarize_arguments(dict(call.arguments), limit=200)
            lines.append(
                f"  #{call.index} {call.label} ({call.risk}, occurrence {call.occurrence + 1}) {arguments}"
            )
        lines.append(
            f"Nothing was sent but the reads. A person approves it with "
            f"`codemode approve --plan {self.plan_id}`; then run the same code with "
            f"with_plan={self.plan_id!r}."
        )
        return "\n".join(lines)

    def review_text(self) -> str:
        """The plan as a person approves it: the program, its digest, and each planned call with
        its tool, risk and arguments (secrets hidden). What an approval of it binds is
        :attr:`digest`: exactly what this text shows."""
        lines = [
            f"plan {self.plan_id} for {self.principal}@{self.tenant}: {len(self.calls)} planned calls",
            f"code sha256:{self.code_digest}",
            "--- the program ---",
            escape_invisible(self.code.rstrip("\n")),  # a person judges it: nothing may hide in it
            "--- planned calls ---",
        ]
        for call in self.calls:
            arguments = summarize_arguments(dict(call.arguments), limit=200)
            lines.append(
                f"#{call.index} {call.label} (risk: {call.risk}, "
                f"occurrence {call.occurrence + 1}) {arguments}"
            )
        if not self.calls:
            lines.append("(none: the program makes no call with side effects)")
        return "\n".join(lines)

    @property
    def digest(self) -> str:
        """What an approval of this plan binds (see :func:`codemode.ledger.plan_digest`)."""
        return plan_digest(self.code_digest, [call.as_json() for call in self.calls])

    def record(self) -> PlanRecord:
        return PlanRecord(
            plan_id=self.plan_id,
            run_id=self.run_id,
            principal=self.principal,
            tenant=self.tenant,
            code_digest=self.code_digest,
            code=self.code,
            calls=tuple(call.as_json() for call in self.calls),
            reads=tuple(read.as_json() for read in self.reads),
            created_at=self.created_at,
            expires_at=self.expires_at,
        )

    @classmethod
    def from_record(cls, record: PlanRecord) -> Plan:
        return cls(
            plan_id=record.plan_id,
            run_id=record.run_id,
            principal=record.principal,
            tenant=record.tenant,
            code_digest=record.code_digest,
            code=record.code,
            calls=tuple(PlannedCall.from_json(call) for call in record.calls),
            reads=tuple(
                PlannedRead(str(r["server"]), str(r["tool"]), str(r["args_digest"])) for r in record.reads
            ),
            created_at=record.created_at,
            expires_at=record.expires_at,
        )


async def dry_run(
    run: Callable[..., Awaitable[RunResult]],
    ledger: Ledger | None,
    *,
    new_plan_at: datetime,
    code: str,
    ttl_s: float,
    **options: Any,
) -> Plan:
    """Run ``code`` with a :class:`Planner` (``run`` is the engine's), then store its plan."""
    planner = Planner()
    result = await run(code, planner=planner, **options)
    plan = new_plan(code, planner, result, new_plan_at, ttl_s)
    assert ledger is not None  # a running engine has one
    await anyio.to_thread.run_sync(ledger.record_plan, plan.record())
    return plan


def new_plan(code: str, planner: Planner, result: RunResult, now: datetime, ttl_s: float) -> Plan:
    """The plan a finished dry run made (``ttl_s``: how long it stays usable)."""
    if not ttl_s > 0:
        raise ValueError(f"a plan's time to live must be positive, not {ttl_s!r}")
    return Plan(
        plan_id="plan_" + secrets.token_hex(8),
        run_id=result.run_id,
        principal=result.principal,
        tenant=result.tenant,
        code_digest=code_digest(code),
        code=code,
        calls=tuple(planner.calls),
        reads=tuple(planner.reads),
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_s),
        result=result,
    )


def record_plan_approval(
    ledger: Ledger, plan: Plan, *, approver: str, ttl: timedelta, note: str | None, now: datetime
) -> PlanRecord:
    """Approve ``plan`` as a person saw it: bound to its :attr:`Plan.digest` (the code's digest and
    each planned call's tool, argument digest and occurrence), until ``now + ttl`` (never past the
    plan's own expiry). How the terminal and ``serve`` approve a plan (the console calls
    ``Ledger.approve_plan`` itself, with the digest its page showed); raises
    :class:`~codemode.ledger.LedgerStateError` when the ledger refuses it."""
    return ledger.approve_plan(
        plan.plan_id, digest=plan.digest, approver=approver, expires_at=now + ttl, note=note
    )


def awaits_approval(record: PlanRecord, code: str, who: tuple[str, str], now: datetime) -> bool:
    """Whether ``record`` lacks only its approval to serve a run of ``code`` by ``who`` (principal,
    tenant): unapproved, not revoked, not expired, made for them and for this very code. Any other
    plan is refused by :func:`approved_plan` with its reason, whatever anyone answers."""
    return (
        record.approved_at is None
        and record.revoked_at is None
        and record.expires_at > now
        and (record.principal, record.tenant) == who
        and record.code_digest == code_digest(code)
    )


async def approved_plan(
    ledger: Ledger | None, plan_id: str, code: str, who: tuple[str, str], now: datetime
) -> ApprovedPlan:
    """The approved plan ``plan_id`` for a run of ``code`` by ``who`` (principal, tenant), or
    :class:`PlanRefusedError` saying why it cannot be used."""
    assert ledger is not None, "the engine is running"
    record = await anyio.to_thread.run_sync(ledger.get_plan, plan_id)
    if record is None:
        raise PlanRefusedError(f"no plan {plan_id} in the ledger; make one with 'codemode run --plan'")
    principal, tenant = who
    why = _refusal(record, code, principal, tenant, now)
    if why is not None:
        raise PlanRefusedError(f"plan {plan_id} cannot be used: {why}")
    assert record.approval_expires_at is not None
    return ApprovedPlan(
        plan_id=plan_id,
        calls=tuple(PlannedCall.from_json(call) for call in record.calls),
        expires_at=record.approval_expires_at.timestamp(),
    )


def _refusal(record: PlanRecord, code: str, principal: str, tenant: str, now: datetime) -> str | None:
    if record.revoked_at is not None:
        return f"it was revoked at {record.revoked_at:%Y-%m-%d %H:%M:%S} UTC"
    if record.approved_at is None or record.approval_expires_at is None:
        return f"it is not approved (approve it with 'codemode approve --plan {record.plan_id}')"
    if record.approval_expires_at <= now:
        expired = f"{record.approval_expires_at:%Y-%m-%d %H:%M:%S} UTC"
        return f"its approval expired at {expired}; plan the run again"
    if (record.principal, record.tenant) != (principal, tenant):
        return f"it was made for {record.principal}@{record.tenant}, not {principal}@{tenant}"
    if record.code_digest != code_digest(code):
        return "it was made for other code (the program's digest differs): plan the changed program again"
    if record.approved_digest != plan_digest(record.code_digest, record.calls):
        return "its planned calls are not the ones that were approved"
    return None
