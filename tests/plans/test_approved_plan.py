"""A run under an approved plan (``CodeMode.run(plan_id=...)``) on the real crm server: exactly
the planned writes are sent without asking, a changed program or another caller is refused, and
a call the plan does not hold is asked for (refused here: the engine has no approver) and counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from codemode import CodeMode
from codemode.broker import ApprovalAnswer, ApprovalRequest, CallbackApprover
from codemode.config import Config
from codemode.engine import Plan
from codemode.errors import PlanRefusedError
from codemode.ledger import StoreLedger, open_ledger
from tests.plans.conftest import CountWrites
from tests.plans.test_dry_run import CREATE_THEN_LINK

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture
def ledger(plan_config: Config) -> Iterator[StoreLedger]:
    """Another client of the engine's ledger: where a person approves plans."""
    with open_ledger(plan_config.ledger_location(), recover=False) as opened:
        yield opened


def approve(ledger: StoreLedger, plan: Plan, *, ttl: timedelta = timedelta(minutes=10)) -> None:
    ledger.approve_plan(plan.plan_id, digest=plan.digest, approver="test", expires_at=datetime.now(UTC) + ttl)


async def test_the_approved_plan_sends_exactly_the_planned_writes_without_asking(
    engine: CodeMode, ledger: StoreLedger, count_writes: CountWrites
) -> None:
    plan = await engine.plan(CREATE_THEN_LINK)
    approve(ledger, plan)
    result = await engine.run(CREATE_THEN_LINK, plan_id=plan.plan_id)  # no approver: nobody is asked
    assert result.status == "ok", result.error
    assert (result.calls, result.denials, result.flags) == (3, 0, ())
    assert count_writes() == 2
    calls = {c.tool: c for c in ledger.list_calls(run_id=result.run_id)}
    note, payment = calls["add_note"], calls["record_payment"]
    # The link took the note's real id, and matched the planned reference to it.
    assert payment.arguments is not None and note.arguments is not None
    assert payment.arguments["reference"].startswith("note_")
    for index, call in enumerate((note, payment)):
        assert call.state == "succeeded" and call.approval_id is not None
        approval = ledger.get_approval(call.approval_id)
        assert approval is not None and approval.approver == f"plan:{plan.plan_id}#{index}"
        assert approval.used_by_call == call.call_id


async def test_a_program_changed_by_one_character_is_refused(engine: CodeMode, ledger: StoreLedger) -> None:
    plan = await engine.plan(CREATE_THEN_LINK)
    approve(ledger, plan)
    with pytest.raises(PlanRefusedError, match="other code"):
        await engine.run(CREATE_THEN_LINK.replace("1250", "1251"), plan_id=plan.plan_id)


async def test_another_principal_an_unapproved_an_expired_or_a_revoked_plan_is_refused(
    engine: CodeMode, ledger: StoreLedger, count_writes: CountWrites
) -> None:
    plan = await engine.plan(CREATE_THEN_LINK)
    with pytest.raises(PlanRefusedError, match="not approved"):
        await engine.run(CREATE_THEN_LINK, plan_id=plan.plan_id)
    with pytest.raises(PlanRefusedError, match="no plan plan_nobody"):
        await engine.run(CREATE_THEN_LINK, plan_id="plan_nobody")
    approve(ledger, plan)
    with pytest.raises(PlanRefusedError, match=f"made for {plan.principal}@{plan.tenant}, not bob@"):
        await engine.run(CREATE_THEN_LINK, plan_id=plan.plan_id, principal="bob")
    ledger.revoke_plan(plan.plan_id)
    with pytest.raises(PlanRefusedError, match="revoked"):
        await engine.run(CREATE_THEN_LINK, plan_id=plan.plan_id)
    expired = await engine.plan(CREATE_THEN_LINK)
    approve(ledger, expired, ttl=timedelta(seconds=-1))
    with pytest.raises(PlanRefusedError, match="approval expired"):
        await engine.run(CREATE_THEN_LINK, plan_id=expired.plan_id)
    assert count_writes() == 0


DIVERGING = """
import codemode
from servers.crm import add_note, list_writes
done = []
for i in range(list_writes(tool="add_note")["total"] + 1):
    try:
        add_note(customer_id="CUST-0004", text=f"note {i}")
        done.append(i)
    except codemode.CallDenied:
        pass
done
"""


async def test_a_call_outside_the_plan_is_asked_for_and_counted(
    engine: CodeMode, ledger: StoreLedger, count_writes: CountWrites
) -> None:
    plan = await engine.plan(DIVERGING)
    assert [c.arguments["text"] for c in plan.calls] == ["note 0"]
    approve(ledger, plan)
    asked: list[ApprovalRequest] = []

    async def answer(request: ApprovalRequest) -> ApprovalAnswer:
        asked.append(request)
        return ApprovalAnswer(approved=True, approver="test")

    # Meanwhile another note is written: the program reads 1 and now wants two notes.
    outside = "from servers.crm import add_note\nadd_note(customer_id='CUST-0009', text='meanwhile')"
    assert (await engine.run(outside, approver=CallbackApprover(answer))).status == "ok"
    assert len(asked) == 1
    result = await engine.run(DIVERGING, plan_id=plan.plan_id)  # nobody to ask: the extra call is refused
    assert result.status == "ok", result.error
    assert result.result == [0], "the planned note went through without asking; the extra one did not"
    assert result.denials == 1
    assert f"1 calls outside the approved plan {plan.plan_id}" in result.flags
    assert count_writes() == 2
    # Planned again (3 notes now), then diverging again, with someone to ask: only the extra is asked.
    again = await engine.plan(DIVERGING)
    approve(ledger, again)
    assert (await engine.run(outside, approver=CallbackApprover(answer))).status == "ok"
    asked.clear()
    result = await engine.run(DIVERGING, plan_id=again.plan_id, approver=CallbackApprover(answer))
    assert result.result == [0, 1, 2, 3]
    assert [r.arguments_summary for r in asked] == ['{"customer_id": "CUST-0004", "text": "note 3"}']
    assert f"1 calls outside the approved plan {again.plan_id}" in result.flags


async def test_a_plan_for_another_tenant_is_refused_and_sends_nothing(
    engine: CodeMode, ledger: StoreLedger, count_writes: CountWrites
) -> None:
    plan = await engine.plan(CREATE_THEN_LINK)
    approve(ledger, plan)
    other = f"{plan.tenant}-other"
    with pytest.raises(
        PlanRefusedError, match=f"made for {plan.principal}@{plan.tenant}, not {plan.principal}@{other}"
    ):
        await engine.run(CREATE_THEN_LINK, plan_id=plan.plan_id, tenant=other)
    assert count_writes() == 0
    assert (await engine.run(CREATE_THEN_LINK, plan_id=plan.plan_id)).status == "ok", "its own tenant runs it"


REPEATING = """
import codemode
from servers.crm import add_note, list_writes
sent = 0
for _ in range(list_writes(tool="add_note")["total"] + 1):
    try:
        add_note(customer_id="CUST-0005", text="the same note")
        sent += 1
    except codemode.CallDenied:
        pass
sent
"""


async def test_a_planned_call_is_not_sent_twice_by_one_run(
    engine: CodeMode, ledger: StoreLedger, count_writes: CountWrites
) -> None:
    plan = await engine.plan(REPEATING)
    assert len(plan.calls) == 1
    approve(ledger, plan)
    outside = "from servers.crm import add_note\nadd_note(customer_id='CUST-0009', text='meanwhile')"
    assert (await engine.run(outside, approver=CallbackApprover(_yes))).status == "ok"
    # The program now repeats the planned call with the very same arguments: one approval, one send.
    result = await engine.run(REPEATING, plan_id=plan.plan_id)
    assert (result.status, result.result, result.denials) == ("ok", 1, 1), result.error
    assert f"1 calls outside the approved plan {plan.plan_id}" in result.flags
    assert count_writes() == 2


async def _yes(request: ApprovalRequest) -> ApprovalAnswer:
    return ApprovalAnswer(approved=True, approver="test")
