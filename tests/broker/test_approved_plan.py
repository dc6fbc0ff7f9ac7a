"""Which calls an approved plan covers (``ApprovedPlan.match``), on hand-built planned calls: the
same tool, argument digest and occurrence, each planned call once, and a reference to a planned
call's result matched against that call's real result in this run."""

from __future__ import annotations

import json
from typing import Any, cast

from codemode.broker import ApprovedPlan, PlannedCall
from codemode.calls import ToolResult, content_blocks
from codemode.ledger import arguments_digest


def digest(arguments: dict[str, Any]) -> str:
    return arguments_digest(arguments)


def planned(index: int, tool: str, arguments: dict[str, Any], occurrence: int = 0) -> PlannedCall:
    values: list[Any] = list(arguments.values())
    refs = tuple(int(cast(dict[str, Any], v)["$planned"]) for v in values if isinstance(v, dict))
    return PlannedCall(
        index=index,
        server="crm",
        tool=tool,
        arguments=arguments,
        args_digest=digest(arguments),
        occurrence=occurrence,
        risk="medium",
        decisions=(),
        references=refs,
    )


def plan(*calls: PlannedCall) -> ApprovedPlan:
    return ApprovedPlan(plan_id="plan_x", calls=calls, expires_at=1e12)


def match(approved: ApprovedPlan, tool: str, arguments: dict[str, Any]) -> int | None:
    found = approved.match("crm", tool, arguments, arguments, digest)
    return None if found is None else found.index


def test_each_planned_call_is_used_once_in_its_occurrence() -> None:
    note = {"customer_id": "CUST-0001", "text": "a"}
    approved = plan(planned(0, "add_note", note), planned(1, "add_note", note, occurrence=1))
    assert [match(approved, "add_note", note) for _ in range(3)] == [0, 1, None]
    assert approved.outside == 1
    assert approved.flags() == ["1 calls outside the approved plan plan_x"]


def test_other_arguments_or_another_tool_are_outside_the_plan() -> None:
    approved = plan(planned(0, "add_note", {"customer_id": "CUST-0001", "text": "a"}))
    assert match(approved, "add_note", {"customer_id": "CUST-0001", "text": "b"}) is None
    assert match(approved, "record_payment", {"customer_id": "CUST-0001", "text": "a"}) is None
    assert approved.outside == 2
    assert "1 planned calls of plan_x were not made" in approved.flags()


def test_a_reference_matches_the_real_result_of_the_call_it_names() -> None:
    note = {"customer_id": "CUST-0001", "text": "a"}
    link = {"customer_id": "CUST-0001", "reference": {"$planned": 0, "path": ["note_id"]}}
    approved = plan(planned(0, "add_note", note), planned(1, "record_payment", link))
    first = approved.match("crm", "add_note", note, note, digest)
    assert first is not None and first.approver == "plan:plan_x#0"
    result = {"note_id": "note_000007", "receipt_id": "rcpt_000007"}
    text = content_blocks([{"type": "text", "text": json.dumps(result)}])
    approved.completed(first, ToolResult(content=text))  # the program got it from its text
    other = {"customer_id": "CUST-0001", "reference": "note_000008"}
    assert match(approved, "record_payment", other) is None, "not the note's id"
    real = {"customer_id": "CUST-0001", "reference": "note_000007"}
    assert match(approved, "record_payment", real) == 1


def test_a_reference_to_a_call_that_did_not_run_matches_nothing() -> None:
    link = {"customer_id": "CUST-0001", "reference": {"$planned": 0}}
    approved = plan(planned(0, "add_note", {"text": "a"}), planned(1, "record_payment", link))
    assert match(approved, "record_payment", {"customer_id": "CUST-0001", "reference": "x"}) is None
    forged = {"customer_id": "CUST-0001", "reference": {"$planned": 0}}
    assert match(approved, "record_payment", forged) is None, "a reference written by hand is no result"
