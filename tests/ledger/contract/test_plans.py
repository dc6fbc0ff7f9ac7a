"""Plans of dry runs, on every store: recorded once by one client, read back whole by another,
never rewritten, and covered by ``verify``."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from codemode.ledger import LedgerStateError, PlanRecord, StoreLedger, plan_digest
from tests.ledger.contract.conftest import MakeLedger, OpenClient

NOW = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _plan(plan_id: str = "plan_0123456789abcdef") -> PlanRecord:
    now = NOW
    return PlanRecord(
        plan_id=plan_id,
        run_id="run-1",
        principal="alice",
        tenant="acme",
        code_digest="ab" * 32,
        code="from servers.crm import add_note\nadd_note(text='é')\n",
        calls=(
            {"index": 0, "server": "crm", "tool": "add_note", "args_digest": "sha256:01", "occurrence": 0},
            {"index": 1, "server": "crm", "tool": "link", "args_digest": "sha256:02", "occurrence": 0},
        ),
        reads=({"server": "crm", "tool": "get_customer", "args_digest": "sha256:00"},),
        created_at=now,
        expires_at=now + timedelta(hours=1),
    )


def test_a_plan_recorded_by_one_client_is_read_whole_by_another(
    connect: OpenClient, make_ledger: MakeLedger
) -> None:
    first, second = make_ledger(connect()), make_ledger(connect())
    recorded = first.record_plan(_plan())
    assert recorded == _plan()
    assert second.get_plan(recorded.plan_id) == recorded
    assert second.get_plan("plan_nobody") is None
    assert [e.kind for e in second.events()] == ["plan_recorded"]
    assert second.verify().ok


def test_a_plan_is_never_rewritten(ledger: StoreLedger) -> None:
    recorded = ledger.record_plan(_plan())
    changed = dataclasses.replace(_plan(), calls=())
    with pytest.raises(LedgerStateError, match="already exists"):
        ledger.record_plan(changed)
    assert ledger.get_plan(recorded.plan_id) == recorded
    assert ledger.verify().ok


def test_a_plan_that_expires_before_it_starts_is_refused(ledger: StoreLedger) -> None:
    plan = _plan()
    with pytest.raises(LedgerStateError, match="expire after"):
        ledger.record_plan(dataclasses.replace(plan, expires_at=plan.created_at))
    assert ledger.events() == []


def test_a_plan_edited_behind_the_ledgers_back_is_found_by_verify(ledger: StoreLedger) -> None:
    recorded = ledger.record_plan(_plan())
    with ledger.store.transaction(write=True) as tx:  # what someone with write access could do
        tx.update("plans", recorded.plan_id, {"calls_json": "[]"})
    report = ledger.verify()
    assert [(p.kind, p.where) for p in report.problems] == [
        ("row_edited", f"plans/{recorded.plan_id} column calls_json")
    ]


def _digest(plan: PlanRecord) -> str:
    return plan_digest(plan.code_digest, plan.calls)


def test_a_plan_is_approved_once_and_every_client_sees_it(
    connect: OpenClient, make_ledger: MakeLedger
) -> None:
    first, second = make_ledger(connect()), make_ledger(connect())
    plan = first.record_plan(_plan())
    until = NOW + timedelta(minutes=10)
    approved = first.approve_plan(
        plan.plan_id, digest=_digest(plan), approver="cli", expires_at=until, note="ok"
    )
    read = second.get_plan(plan.plan_id)
    assert read is not None
    assert read == approved and read.approved_by == "cli" and read.approval_note == "ok"
    assert read.approved_digest == _digest(plan)
    assert read.approval_expires_at == min(until, plan.expires_at), "never past the plan's own expiry"
    with pytest.raises(LedgerStateError, match="approved already"):
        second.approve_plan(plan.plan_id, digest=_digest(plan), approver="cli", expires_at=until)
    assert [e.kind for e in second.events()] == ["plan_recorded", "plan_approved"]
    assert second.verify().ok


def test_an_approval_is_refused_for_another_digest_an_unknown_or_a_revoked_plan(ledger: StoreLedger) -> None:
    plan = ledger.record_plan(_plan())
    until = NOW + timedelta(minutes=10)
    with pytest.raises(LedgerStateError, match="not the plan that was shown"):
        ledger.approve_plan(plan.plan_id, digest="sha256:other", approver="cli", expires_at=until)
    with pytest.raises(LedgerStateError, match="no plan plan_nobody"):
        ledger.approve_plan("plan_nobody", digest=_digest(plan), approver="cli", expires_at=until)
    revoked = ledger.revoke_plan(plan.plan_id)
    assert revoked.revoked_at is not None
    assert ledger.revoke_plan(plan.plan_id) == revoked, "revoking twice changes nothing"
    with pytest.raises(LedgerStateError, match="revoked"):
        ledger.approve_plan(plan.plan_id, digest=_digest(plan), approver="cli", expires_at=until)
    assert [e.kind for e in ledger.events()] == ["plan_recorded", "plan_revoked"]
    assert ledger.verify().ok


def test_an_expired_plan_cannot_be_approved(ledger: StoreLedger) -> None:
    expired = dataclasses.replace(
        _plan(), created_at=NOW - timedelta(days=400), expires_at=NOW - timedelta(days=399)
    )
    ledger.record_plan(expired)
    with pytest.raises(LedgerStateError, match="expired"):
        ledger.approve_plan(expired.plan_id, digest=_digest(expired), approver="cli", expires_at=NOW)


def test_plans_are_listed_newest_first_by_tenant(connect: OpenClient, make_ledger: MakeLedger) -> None:
    first, second = make_ledger(connect()), make_ledger(connect())
    for n, tenant in enumerate(("acme", "globex", "acme")):
        made = NOW + timedelta(minutes=n)
        first.record_plan(
            dataclasses.replace(
                _plan(f"plan_{n}"), tenant=tenant, created_at=made, expires_at=made + timedelta(hours=1)
            )
        )
    assert [p.plan_id for p in second.list_plans()] == ["plan_2", "plan_1", "plan_0"]
    assert [p.plan_id for p in second.list_plans(tenants=("acme",))] == ["plan_2", "plan_0"]
    assert [p.plan_id for p in second.list_plans(tenants=("acme",), limit=1)] == ["plan_2"]
    assert second.list_plans(tenants=()) == [], "no tenant: no plan"
    assert second.list_plans(tenants=("globex",)) == [second.get_plan("plan_1")]
