"""A call's step that plans bring, once the gates allowed it.

In a dry run: planned (not sent), or sent as a read (see :mod:`codemode.broker._planning`). Under
an approved plan: the planned call it is, if any (see :mod:`codemode.broker._approved_plan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from codemode.broker._approvals import ApprovalAnswer, ApprovalRequest
from codemode.broker._approved_plan import ApprovedPlan, PlanMatch
from codemode.broker._decisions import Gate
from codemode.broker._facts import Call, Facts
from codemode.broker._planning import Planner
from codemode.broker.gates import ApprovalStore, ConsentGate, consent_digest, summarize_arguments
from codemode.calls import CallPlanned


def plan_or_note_read(
    planner: Planner, call: Call, facts: Facts, gates: Sequence[Gate], consent: ConsentGate, *, checked: bool
) -> CallPlanned | None:
    """Plan ``call`` unless it is known to be read-only and needs no planned result (then note
    it as a read and return None: it is sent). ``checked``: its arguments passed their schema
    (a call holding a planned result is checked in the real run, where the value exists)."""
    digest = consent_digest(dict(call.arguments), facts.pinned)
    if facts.risk == "low" and checked:
        planner.note_read(call.server, call.name, digest)
        return None
    lines = [f"allowed by the gates: {', '.join(gate.name for gate in gates)}"]
    if not checked:
        lines.append("arguments hold a planned result: checked against the schema in the real run")
    why = consent.reason_for_consent(call, facts)
    lines.append("consent: not needed by the policy" if why is None else f"consent: needs approval ({why})")
    return planner.plan(
        server=call.server,
        tool=call.name,
        as_passed=call.as_passed,
        args_digest=digest,
        risk=facts.risk,
        decisions=lines,
    )


def plan_match(approved: ApprovedPlan | None, call: Call, facts: Facts) -> PlanMatch | None:
    """The approved planned call that ``call`` is (it then needs no other approval), or None.
    Only a side-effecting call is matched (a read was never planned), and only under a plan."""
    if approved is None or facts.risk == "low":
        return None
    if call.now >= approved.expires_at:
        approved.count_outside()
        return None

    def digest(arguments: dict[str, Any]) -> str:
        return consent_digest(arguments, facts.pinned)

    return approved.match(call.server, call.name, call.arguments, call.as_passed, digest)


async def record_plan_approval(store: ApprovalStore, call: Call, facts: Facts, match: PlanMatch) -> str:
    """Record the approval the plan gave this call, consumed by it, like any approval (its
    evidence then checks as one); its id."""
    request = ApprovalRequest(
        call_id=call.call_id,
        principal=call.binding.principal,
        tenant=call.binding.tenant,
        server=call.server,
        tool=call.name,
        risk=facts.risk,
        why=f"planned call #{match.index} of an approved plan",
        arguments_summary=summarize_arguments(dict(call.as_passed)),
        args_digest=consent_digest(dict(call.arguments), facts.pinned),
        expires_at=match.expires_at,
    )
    answer = ApprovalAnswer(approved=True, approver=match.approver)
    return await anyio.to_thread.run_sync(store.record_granted, request, answer)
