"""Which plan a person may be asked to approve for a run (``awaits_approval``): only one that lacks
nothing but its approval. Any other (approved, revoked, expired, another caller's, other code) is
never offered, whatever anyone would answer; and what the person is shown is what is bound."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta

from codemode.engine import Plan, awaits_approval
from codemode.ledger import PlanRecord

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
CODE = 'add_note(customer_id="CUST-0001", text="hi")\n'


def code_digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


CALL: dict[str, object] = {
    "index": 0,
    "server": "crm",
    "tool": "add_note",
    "arguments": {"customer_id": "CUST-0001", "text": "hi"},
    "args_digest": "sha256:ab",
    "occurrence": 0,
    "risk": "medium",
    "decisions": list[str](),
}


def record(**changes: object) -> PlanRecord:
    plan = PlanRecord(
        plan_id="plan_1",
        run_id="run_1",
        principal="alice",
        tenant="acme",
        code_digest=code_digest(CODE),
        code=CODE,
        calls=(CALL,),
        reads=(),
        created_at=NOW - timedelta(minutes=1),
        expires_at=NOW + timedelta(hours=1),
    )
    return dataclasses.replace(plan, **changes)  # type: ignore[arg-type]


def test_only_a_plan_lacking_nothing_but_its_approval_awaits_it() -> None:
    who = ("alice", "acme")
    assert awaits_approval(record(), CODE, who, NOW)
    assert not awaits_approval(record(approved_at=NOW), CODE, who, NOW), "approved already"
    assert not awaits_approval(record(revoked_at=NOW), CODE, who, NOW)
    assert not awaits_approval(record(expires_at=NOW), CODE, who, NOW)
    assert not awaits_approval(record(), CODE, ("bob", "acme"), NOW)
    assert not awaits_approval(record(), CODE, ("alice", "other"), NOW)
    assert not awaits_approval(record(), CODE + " ", who, NOW), "one character more is other code"


def test_the_review_shows_the_program_its_digest_and_every_planned_call() -> None:
    text = Plan.from_record(record()).review_text()
    assert f"code sha256:{code_digest(CODE)}" in text
    assert CODE.strip() in text
    assert "#0 crm/add_note (risk: medium, occurrence 1)" in text and "CUST-0001" in text


def test_nothing_hides_in_the_program_a_person_reviews() -> None:
    hidden = 'add_note(customer_id="CUST-0001", text="hi")  # \u202eevil\n'
    text = Plan.from_record(record(code=hidden)).review_text()
    assert "\u202e" not in text and "\\u202e" in text
