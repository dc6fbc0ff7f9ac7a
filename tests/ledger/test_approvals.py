"""Approvals: stored once, consumed once, only for the call, arguments, risk and time they name."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from codemode.ledger import (
    ApprovalConsumed,
    ApprovalRecord,
    ApprovalRefused,
    LedgerStateError,
    SqliteLedger,
    arguments_digest,
)

ARGS = {"customer_id": 42, "amount": 100}
DIGEST = arguments_digest(ARGS)


def approval(clock: Any, **changes: Any) -> ApprovalRecord:
    data: dict[str, Any] = {
        "approval_id": "ap-1",
        "tenant": "acme",
        "principal": "alice",
        "server": "crm",
        "tool": "record_payment",
        "args_digest": DIGEST,
        "risk": "high",
        "call_id": "run-1/3",
        "approver": "terminal:alice",
        "issued_at": clock.now,
        "expires_at": clock.now + timedelta(minutes=5),
    }
    data.update(changes)
    return ApprovalRecord(**data)


def use(ledger: SqliteLedger, approval_id: str = "ap-1", **changes: Any) -> Any:
    request: dict[str, Any] = {
        "call_id": "run-1/3",
        "tenant": "acme",
        "principal": "alice",
        "server": "crm",
        "tool": "record_payment",
        "args_digest": DIGEST,
        "risk": "high",
    }
    request.update(changes)
    return ledger.consume_approval(approval_id, **request)


def test_an_approval_is_consumed_once_for_its_call(ledger: SqliteLedger, clock: Any) -> None:
    ledger.record_approval(approval(clock))
    first = use(ledger)
    assert isinstance(first, ApprovalConsumed)
    assert first.approval.used_by_call == "run-1/3"
    second = use(ledger)
    assert isinstance(second, ApprovalRefused)
    assert "single-use" in second.reason


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"args_digest": arguments_digest({"customer_id": 42, "amount": 100_000})}, "other arguments"),
        ({"call_id": "run-1/4"}, "bound to call run-1/3"),
        ({"tool": "delete_customer"}, "issued for crm/record_payment"),
        ({"tenant": "other"}, "another tenant"),
        ({"principal": "mallory"}, "another tenant or principal"),
        ({"risk": "critical"}, "risk"),
    ],
)
def test_an_approval_is_refused_for_anything_it_was_not_issued_for(
    ledger: SqliteLedger, clock: Any, changes: dict[str, Any], reason: str
) -> None:
    ledger.record_approval(approval(clock))
    refused = use(ledger, **changes)
    assert isinstance(refused, ApprovalRefused)
    assert reason in refused.reason
    assert ledger.get_approval("ap-1").used_at is None  # type: ignore[union-attr]
    assert isinstance(use(ledger), ApprovalConsumed)  # still usable for what it names


def test_an_expired_approval_is_refused(ledger: SqliteLedger, clock: Any) -> None:
    ledger.record_approval(approval(clock))
    clock.advance(301)
    refused = use(ledger)
    assert isinstance(refused, ApprovalRefused)
    assert "expired" in refused.reason


def test_an_approval_for_a_higher_risk_covers_a_lower_one(ledger: SqliteLedger, clock: Any) -> None:
    ledger.record_approval(approval(clock))
    assert isinstance(use(ledger, risk="medium"), ApprovalConsumed)


def test_an_approval_for_a_lower_risk_does_not_cover_a_higher_one(ledger: SqliteLedger, clock: Any) -> None:
    ledger.record_approval(approval(clock, risk="medium"))
    assert isinstance(use(ledger, risk="high"), ApprovalRefused)


def test_a_pre_issued_approval_binds_tool_and_arguments_and_serves_any_one_call(
    ledger: SqliteLedger, clock: Any
) -> None:
    ledger.record_approval(approval(clock, call_id=None))
    assert isinstance(use(ledger, call_id="run-9/0"), ApprovalConsumed)
    assert isinstance(use(ledger, call_id="run-9/1"), ApprovalRefused)


def test_an_unknown_approval_is_refused(ledger: SqliteLedger) -> None:
    refused = use(ledger, approval_id="nope")
    assert isinstance(refused, ApprovalRefused)
    assert refused.reason == "no such approval"


def test_an_approval_id_cannot_be_recorded_twice(ledger: SqliteLedger, clock: Any) -> None:
    ledger.record_approval(approval(clock))
    with pytest.raises(LedgerStateError, match="already exists"):
        ledger.record_approval(approval(clock, args_digest="sha256:other"))


def test_concurrent_consumers_of_one_approval_get_exactly_one_success(open_at: Any, clock: Any) -> None:
    import threading

    first = open_at()
    first.record_approval(approval(clock, call_id=None))
    ledgers = [first, *(open_at() for _ in range(7))]
    barrier = threading.Barrier(len(ledgers))
    results: list[Any] = []

    def consume(n: int) -> None:
        barrier.wait(timeout=30)
        results.append(use(ledgers[n], call_id=f"run-1/{n}"))

    threads = [threading.Thread(target=consume, args=(n,)) for n in range(len(ledgers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sum(isinstance(r, ApprovalConsumed) for r in results) == 1
    assert len(results) == len(ledgers)
