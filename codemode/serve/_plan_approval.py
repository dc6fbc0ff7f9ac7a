"""Approving a plan through the MCP client, before ``run_code(with_plan=PLAN_ID)`` runs under it.

A dry run (``run_code(plan=true)``) only makes a plan; nothing asks anyone then. When the caller
then runs the same code under that plan and the plan lacks only its approval (it is for this
principal, tenant and code, neither expired nor revoked: :func:`codemode.engine.awaits_approval`),
the person at the client is asked once for the whole plan: they see the program, its digest and
every planned call (tool, risk, arguments). An accepted ``approve: true`` approves it through the
same function as ``codemode approve --plan`` (:func:`codemode.engine.record_plan_approval`), bound
to the code's digest and each planned call, recorded in the ledger with who answered; the run then
sends the planned calls without asking again. Anything else refuses the run before anything is
sent, and says how a person approves the plan on the host. A plan that cannot serve this run
(other code, another principal, expired, revoked) is never offered: the engine refuses it with its
reason, whatever anyone would have answered.

The question goes the way the run's other questions go: the back-channel of a handshake-era
request, or the next input round of a 2026-07-28 run (an :class:`~codemode.serve._consent.Asker`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import anyio
import mcp_types

from codemode.engine import CodeMode, Plan, awaits_approval, record_plan_approval
from codemode.errors import PolicyError
from codemode.ledger import LedgerStateError
from codemode.serve._consent import Asker, ask_approval, yes_no_schema

log = logging.getLogger("codemode.serve")

PLAN_QUESTION = "Approve the program and every planned call above, for this run?"


def plan_approval_params(plan: Plan, ttl_s: float) -> mcp_types.ElicitRequestFormParams:
    message = (
        "codemode asks for approval of a whole plan: the program below and every call it planned.\n"
        f"{plan.review_text()}\n"
        f"Approved, this run sends exactly these calls without asking again. The approval is bound "
        f"to this code's digest and to each planned call's tool and arguments, and expires in "
        f"{int(ttl_s)} s."
    )
    return mcp_types.ElicitRequestFormParams(
        message=message,
        requested_schema=yes_no_schema(PLAN_QUESTION),  # type: ignore[arg-type]
    )


def how_to_approve(plan_id: str) -> str:
    return (
        f"a person approves it on the host with `codemode approve --plan {plan_id}`, or in the console's "
        f"plans page (after reviewing it), then the same code runs with with_plan={plan_id!r}"
    )


async def approve_by_asking(
    engine: CodeMode, asker: Asker, code: str, plan_id: str, principal: str | None, tenant: str | None
) -> str | None:
    """Ask the client's user to approve plan ``plan_id`` for this run of ``code`` when it lacks only
    that. None: the run may go on (approved now, or nothing to ask: the engine then judges the
    plan as usual); otherwise why it is refused, for the caller."""
    try:
        who = engine.config.policy.identity(principal, tenant)
    except PolicyError:
        return None  # the run itself refuses this caller, with the policy's reason
    ledger = engine.ledger
    record = await anyio.to_thread.run_sync(ledger.get_plan, plan_id)
    now = datetime.now(UTC)
    if record is None or not awaits_approval(record, code, who, now):
        return None
    plan = Plan.from_record(record)
    ttl_s = engine.config.policy.consent.approval_ttl_s
    answer = await ask_approval(asker, plan_approval_params(plan, ttl_s), ttl_s)
    if not answer.approved:
        if answer.unreachable:
            return (
                f"plan {plan_id} is not approved, and this MCP client cannot be asked (it does not "
                f"support elicitation); nothing was sent: {how_to_approve(plan_id)}"
            )
        return (
            f"plan {plan_id} was not approved ({answer.reason}); nothing was sent: {how_to_approve(plan_id)}"
        )

    def approve() -> None:
        record_plan_approval(
            ledger,
            plan,
            approver=answer.approver,
            ttl=timedelta(seconds=ttl_s),
            note="approved through the MCP client's elicitation",
            now=datetime.now(UTC),
        )

    try:
        await anyio.to_thread.run_sync(approve)
    except LedgerStateError as exc:
        # Approved (or revoked) by someone else meanwhile: the engine judges it as it now stands.
        log.info("plan %s was not approved through the client: %s", plan_id, exc)
    return None
