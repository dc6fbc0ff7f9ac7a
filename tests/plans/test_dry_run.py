"""A dry run (``CodeMode.plan``) on the real crm server: reads are sent, writes are planned and
never reach the server, planned results are opaque placeholders, and the plan is in the ledger."""

from __future__ import annotations

import pytest

from codemode import CodeMode
from tests.plans.conftest import CountWrites

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CREATE_THEN_LINK = """
from servers.crm import add_note, get_customer, record_payment
customer = get_customer(customer_id="CUST-0001")
note = add_note(customer_id=customer["customer_id"], text="called about the invoice")
record_payment(customer_id="CUST-0001", amount_cents=1250, reference=note["note_id"])
"planned"
"""


async def test_a_planned_program_sends_no_write_and_its_plan_is_stored(
    engine: CodeMode, count_writes: CountWrites
) -> None:
    plan = await engine.plan(CREATE_THEN_LINK)
    assert plan.result is not None and plan.result.status == "ok", plan.result
    assert count_writes() == 0, "nothing planned reached the server"
    assert [(r.server, r.tool) for r in plan.reads] == [("crm", "get_customer")]
    note, payment = plan.calls
    assert (note.label, note.index, note.occurrence, note.risk) == ("crm/add_note", 0, 0, "medium")
    assert note.arguments == {"customer_id": "CUST-0001", "text": "called about the invoice"}
    assert any(line.startswith("consent: needs approval") for line in note.decisions)
    # The link holds a reference to the note's result, digested as such.
    assert payment.arguments["reference"] == {"$planned": 0, "path": ["note_id"]}
    assert payment.references == (0,)
    assert any("checked against the schema in the real run" in line for line in payment.decisions)
    assert plan.principal and plan.tenant and len(plan.code_digest) == 64
    assert plan.expires_at > plan.created_at
    stored = engine._ledger.get_plan(plan.plan_id)  # pyright: ignore[reportPrivateUsage, reportOptionalMemberAccess]
    assert stored is not None and stored == plan.record()


async def test_a_planned_result_cannot_be_used_as_data(engine: CodeMode, count_writes: CountWrites) -> None:
    program = """
import json
import codemode
from servers.crm import add_note
note = add_note(customer_id="CUST-0002", text="x")
errors = []
for use in (str, bool, len, list, lambda v: v + 1, lambda v: v.note_id, lambda v: v == 1, json.dumps,
            lambda v: v["note_id"].upper()):
    try:
        use(note)
        errors.append("no error")
    except codemode.PlannedValueError as exc:
        errors.append(str(exc))
    except TypeError as exc:
        errors.append("TypeError: " + str(exc))
errors
"""
    plan = await engine.plan(program)
    assert plan.result is not None and plan.result.status == "ok", plan.result
    messages = plan.result.result
    assert isinstance(messages, list) and len(messages) == 9
    named = [m for m in messages if isinstance(m, str) and "planned call #0 (crm/add_note)" in m]
    assert len(named) == 8, messages
    assert "not JSON serializable" in str(messages[7])
    assert "['note_id']" in str(messages[8]), "a field of a planned result is named with its path"
    assert count_writes() == 0


async def test_reads_go_to_the_server_and_their_values_are_real(engine: CodeMode) -> None:
    plan = await engine.plan(
        "from servers.crm import get_customer\nget_customer(customer_id='CUST-0003')['customer_id']"
    )
    assert plan.result is not None and plan.result.result == "CUST-0003"
    assert plan.calls == () and len(plan.reads) == 1


async def test_the_same_call_twice_is_two_occurrences(engine: CodeMode) -> None:
    program = """
from servers.crm import add_note
for _ in range(2):
    add_note(customer_id="CUST-0001", text="a")
"""
    plan = await engine.plan(program)
    assert [c.occurrence for c in plan.calls] == [0, 1]
    assert plan.calls[0].args_digest == plan.calls[1].args_digest


async def test_a_real_run_is_unchanged(engine: CodeMode, count_writes: CountWrites) -> None:
    """Without a plan, the same program is refused its write (no approver): plan mode is opt-in."""
    result = await engine.run(CREATE_THEN_LINK)
    assert result.status == "error" and result.denials == 1
    assert count_writes() == 0


async def test_a_planned_result_as_the_final_value_is_shown_as_what_it_stands_for(engine: CodeMode) -> None:
    program = "from servers.crm import add_note\nadd_note(customer_id='CUST-0001', text='a')"
    plan = await engine.plan(program)
    assert plan.result is not None and plan.result.status == "ok", plan.result
    assert plan.result.result == "<the result of planned call #0 (crm/add_note)>"
