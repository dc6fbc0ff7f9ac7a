"""Quota counters and run slots (issue 42), on every store: fixed windows that roll over, limits
per principal and per tenant, slots freed by a run's end, a dead owner or an expiry, one count
shared by every client of the store (two replicas), and the last unit taken only once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from codemode.calls import RunBinding
from codemode.ledger import QuotaRefusal, SlotLimit, StoreLedger, WindowLimit
from codemode.testing import FakeClock
from tests.ledger.contract.conftest import MakeLedger, OpenClient

START = datetime(2026, 3, 2, 10, 15, 30, tzinfo=UTC)


def _binding(n: int, principal: str = "alice", tenant: str = "acme") -> RunBinding:
    return RunBinding(run_id=f"run-{principal}-{n}", principal=principal, tenant=tenant, trace_id=f"t{n}")


def _begin(
    ledger: StoreLedger,
    binding: RunBinding,
    windows: list[WindowLimit] | None = None,
    slots: list[SlotLimit] | None = None,
) -> QuotaRefusal | None:
    return ledger.quotas.begin_run(
        binding, "sha256:code", windows=windows or [], slots=slots or [], slot_ttl_s=60
    )


def test_runs_per_minute_refuse_the_next_run_until_the_minute_rolls_over(
    make_ledger: MakeLedger, clock: FakeClock
) -> None:
    clock.now = START
    ledger = make_ledger()
    per_minute = [WindowLimit("principal", "alice", "runs", "minute", 2)]
    assert _begin(ledger, _binding(1), per_minute) is None
    assert _begin(ledger, _binding(2), per_minute) is None
    refused = _begin(ledger, _binding(3), per_minute)
    assert refused is not None
    assert (refused.quota, refused.limit, refused.used) == ("runs_per_minute", 2, 2)
    assert refused.retry_after_s == 30.0 and refused.retry_at.startswith("2026-03-02T10:16:00")
    record = ledger.get_run("run-alice-3")
    assert record is not None and record.status == "refused", "the refusal is in the ledger"
    assert "runs_per_minute" in str(record.summary)
    clock.advance(30)  # the next minute
    assert _begin(ledger, _binding(4), per_minute) is None
    assert ledger.verify().ok


def test_hourly_and_daily_windows_and_a_tenant_counted_across_its_principals(
    make_ledger: MakeLedger, clock: FakeClock
) -> None:
    clock.now = START
    ledger = make_ledger()
    limits = [
        WindowLimit("principal", "alice", "tool_calls", "hour", 3),
        WindowLimit("tenant", "acme", "tool_calls", "day", 4),
    ]
    for _ in range(3):
        assert ledger.quotas.take_call(_binding(1), limits, money=0) is None
    hourly = ledger.quotas.take_call(_binding(1), limits, money=0)
    assert hourly is not None and hourly.quota == "tool_calls_per_hour" and hourly.holder == "principal"
    assert hourly.retry_after_s == 45 * 60 - 30
    bob = [WindowLimit("tenant", "acme", "tool_calls", "day", 4)]
    assert ledger.quotas.take_call(_binding(1, "bob"), bob, money=0) is None
    daily = ledger.quotas.take_call(_binding(2, "bob"), bob, money=0)
    assert daily is not None and (daily.holder, daily.name, daily.quota) == (
        "tenant",
        "acme",
        "tool_calls_per_day",
    )
    assert daily.retry_at.startswith("2026-03-03T00:00:00")
    clock.advance(3600)  # the next hour, the same day: alice's hour is new, the tenant's day is not
    refused = ledger.quotas.take_call(_binding(1), limits, money=0)
    assert refused is not None and refused.quota == "tool_calls_per_day"
    clock.now = datetime(2026, 3, 3, 0, 0, 1, tzinfo=UTC)
    assert ledger.quotas.take_call(_binding(1), limits, money=0) is None


def test_money_is_counted_exactly_and_a_peek_counts_nothing(
    make_ledger: MakeLedger, clock: FakeClock
) -> None:
    clock.now = START
    ledger = make_ledger()
    money = [WindowLimit("principal", "alice", "money", "day", 1_000_000)]  # 1.0 in millionths
    assert ledger.quotas.take_call(_binding(1), money, money=0.3, peek=True) is None
    for _ in range(3):
        assert ledger.quotas.take_call(_binding(1), money, money=0.3) is None
    refused = ledger.quotas.take_call(_binding(1), money, money=0.3)
    assert refused is not None and refused.quota == "money_per_day"
    assert (refused.limit, round(refused.used, 6)) == (1.0, 0.9)
    assert ledger.quotas.take_call(_binding(1), money, money=0.1) is None


def test_two_replicas_on_one_store_share_the_counts(
    connect: OpenClient, make_ledger: MakeLedger, clock: FakeClock
) -> None:
    clock.now = START
    first, second = make_ledger(connect()), make_ledger(connect())
    per_minute = [WindowLimit("tenant", "acme", "runs", "minute", 2)]
    assert _begin(first, _binding(1), per_minute) is None
    assert _begin(second, _binding(2, "bob"), per_minute) is None
    refused = _begin(first, _binding(3), per_minute)
    assert refused is not None and refused.used == 2, "each replica sees the other's runs"
    one = [SlotLimit("principal", "carol", 1)]
    assert _begin(first, _binding(1, "carol"), slots=one) is None
    assert _begin(second, _binding(2, "carol"), slots=one) is not None, (
        "the slot is held on the other replica"
    )
    first.quotas.release_run("run-carol-1")
    assert _begin(second, _binding(3, "carol"), slots=one) is None


def test_the_last_slot_is_taken_once_by_racing_replicas(
    connect: OpenClient, make_ledger: MakeLedger, clock: FakeClock
) -> None:
    clock.now = START
    ledgers = [make_ledger(connect()) for _ in range(4)]
    one = [SlotLimit("tenant", "acme", 1)]
    barrier = threading.Barrier(len(ledgers))
    outcomes: list[QuotaRefusal | None] = []

    def race(n: int) -> None:
        barrier.wait()
        outcomes.append(_begin(ledgers[n], _binding(n), slots=one))

    threads = [threading.Thread(target=race, args=(n,)) for n in range(len(ledgers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(refusal is None for refusal in outcomes) == [False, False, False, True]


def test_a_slot_is_freed_by_its_end_by_its_owners_death_and_by_its_expiry(
    make_ledger: MakeLedger, clock: FakeClock, dead_owner: str
) -> None:
    clock.now = START
    one = [SlotLimit("principal", "alice", 1)]
    ledger = make_ledger()
    assert _begin(ledger, _binding(1), slots=one) is None
    refused = _begin(ledger, _binding(2), slots=one)
    assert refused is not None and (refused.quota, refused.limit, refused.used) == ("concurrent_runs", 1, 1)
    ledger.quotas.release_run("run-alice-1")
    assert _begin(ledger, _binding(3), slots=one) is None
    clock.advance(61)  # past slot_ttl_s with no sign of life: a replica on another host died
    assert _begin(ledger, _binding(4), slots=one) is None
    # A call of the run is a sign of life: its slot lives on.
    clock.advance(50)
    assert ledger.quotas.take_call(_binding(4), [], money=0, slot_ttl_s=60) is None
    clock.advance(50)
    assert _begin(ledger, _binding(5), slots=one) is not None
    killed = make_ledger(owner=dead_owner)  # a process on this host that is gone frees at once
    assert _begin(killed, _binding(1, "dave"), slots=[SlotLimit("principal", "dave", 1)]) is None
    assert _begin(ledger, _binding(2, "dave"), slots=[SlotLimit("principal", "dave", 1)]) is None
