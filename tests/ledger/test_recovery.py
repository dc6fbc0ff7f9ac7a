"""Crashes and leases: a vanished broker's calls become unknown (sent) or abandoned (never sent)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codemode.calls import ToolResult
from codemode.ledger import (
    CallIntent,
    Fresh,
    InFlight,
    LeaseLostError,
    Replay,
    SqliteLedger,
    Unresolved,
    open_ledger,
)

Intent = Callable[..., CallIntent]
FORK = multiprocessing.get_context("fork")


def test_an_expired_lease_of_a_sent_call_becomes_unknown_never_a_retry(
    open_at: Callable[..., SqliteLedger], intent: Intent, clock: Any
) -> None:
    broker_a, broker_b = open_at(lease_s=10), open_at()
    first = broker_a.reserve(intent(0))
    assert isinstance(first, Fresh)
    broker_a.mark_sent(first.call_id, lease_s=10)
    assert isinstance(broker_b.reserve(intent(1)), InFlight)
    clock.advance(11)
    answer = broker_b.reserve(intent(1))
    assert isinstance(answer, Unresolved)
    call = broker_b.get_call(first.call_id)
    assert call is not None
    assert call.state == "unknown"
    assert "lease" in (call.reason or "")


def test_an_expired_lease_of_a_reserved_call_is_abandoned_and_the_key_runs_again(
    open_at: Callable[..., SqliteLedger], intent: Intent, clock: Any
) -> None:
    broker_a, broker_b = open_at(lease_s=10), open_at()
    first = broker_a.reserve(intent(0))
    assert isinstance(first, Fresh)
    clock.advance(11)
    again = broker_b.reserve(intent(1))
    assert isinstance(again, Fresh)
    assert again.attempt == 2
    assert broker_b.get_call(first.call_id).state == "abandoned"  # type: ignore[union-attr]
    # The slow first owner must not send now: its lease is gone.
    with pytest.raises(LeaseLostError):
        broker_a.mark_sent(first.call_id)


def test_mark_sent_after_the_lease_expired_refuses_and_abandons(
    ledger: SqliteLedger, intent: Intent, clock: Any
) -> None:
    first = ledger.reserve(intent(0), lease_s=5)
    assert isinstance(first, Fresh)
    clock.advance(6)
    with pytest.raises(LeaseLostError):
        ledger.mark_sent(first.call_id)
    assert ledger.get_call(first.call_id).state == "abandoned"  # type: ignore[union-attr]


def test_extend_lease_keeps_a_long_call_in_flight(ledger: SqliteLedger, intent: Intent, clock: Any) -> None:
    first = ledger.reserve(intent(0), lease_s=5)
    assert isinstance(first, Fresh)
    ledger.mark_sent(first.call_id, lease_s=5)
    clock.advance(4)
    ledger.extend_lease(first.call_id, 10)
    clock.advance(4)
    assert isinstance(ledger.reserve(intent(1)), InFlight)


def test_a_call_whose_outcome_could_not_be_recorded_is_released_and_unknown_at_once(
    open_at: Callable[..., SqliteLedger], intent: Intent
) -> None:
    broker = open_at(lease_s=3600)
    first = broker.reserve(intent(0))
    assert isinstance(first, Fresh)
    broker.mark_sent(first.call_id)
    assert isinstance(broker.reserve(intent(1)), InFlight), "our own live lease: wait for it"
    broker.release(first.call_id)  # its answer came while the store was out of reach
    answer = broker.reserve(intent(1))
    assert isinstance(answer, Unresolved), "released: unknown now, not at lease expiry, never re-sent"
    call = broker.get_call(first.call_id)
    assert call is not None and call.state == "unknown"
    assert "could not be recorded" in (call.reason or "")


def test_a_lease_held_by_a_dead_process_on_this_host_is_void_before_it_expires(
    open_at: Callable[..., SqliteLedger], intent: Intent, dead_owner: str
) -> None:
    crashed = open_at(owner=dead_owner, lease_s=3600)
    first = crashed.reserve(intent(0))
    assert isinstance(first, Fresh)
    crashed.mark_sent(first.call_id)
    survivor = open_at(recover=False)
    answer = survivor.reserve(intent(1))
    assert isinstance(answer, Unresolved)
    assert "gone" in (survivor.get_call(first.call_id).reason or "")  # type: ignore[union-attr]


def test_recovery_on_reopen_turns_sent_into_unknown_and_reserved_into_abandoned(
    open_at: Callable[..., SqliteLedger], intent: Intent, binding: Any, dead_owner: str
) -> None:
    crashed = open_at(owner=dead_owner)
    crashed.begin_run(binding, "sha256:code")
    was_sent = crashed.reserve(intent(0, key="a"))
    was_reserved = crashed.reserve(intent(1, key="b"))
    assert isinstance(was_sent, Fresh)
    assert isinstance(was_reserved, Fresh)
    crashed.mark_sent(was_sent.call_id)
    crashed.close()

    restarted = open_at()  # recover=True by default
    assert restarted.get_call(was_sent.call_id).state == "unknown"  # type: ignore[union-attr]
    assert restarted.get_call(was_reserved.call_id).state == "abandoned"  # type: ignore[union-attr]
    assert restarted.get_run(binding.run_id).status == "interrupted"  # type: ignore[union-attr]
    assert isinstance(restarted.reserve(intent(2, key="a")), Unresolved)
    assert isinstance(restarted.reserve(intent(3, key="b")), Fresh)
    assert restarted.verify().ok


def test_recovery_leaves_the_calls_of_a_live_broker_alone(
    open_at: Callable[..., SqliteLedger], intent: Intent
) -> None:
    live = open_at()
    first = live.reserve(intent(0))
    assert isinstance(first, Fresh)
    live.mark_sent(first.call_id)
    report = open_at().recover()
    assert report.calls_unknown == ()
    assert report.calls_abandoned == ()
    assert live.get_call(first.call_id).state == "sent"  # type: ignore[union-attr]


def _send_then_hang(db: str, intent_json: str, sent: Any) -> None:
    ledger = open_ledger(db)
    answer = ledger.reserve(CallIntent.model_validate_json(intent_json))
    assert isinstance(answer, Fresh)
    ledger.mark_sent(answer.call_id)
    sent.set()
    signal.pause()  # the "server" never answers; the parent kills us here


@pytest.mark.integration
def test_a_broker_killed_between_send_and_commit_leaves_an_unknown_call_that_is_not_retried(
    tmp_path: Path, intent: Intent
) -> None:
    db = tmp_path / "ledger.db"
    open_ledger(db).close()
    sent = FORK.Event()
    broker = FORK.Process(target=_send_then_hang, args=(str(db), intent(0).model_dump_json(), sent))
    broker.start()
    assert sent.wait(timeout=30)
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGKILL)
    broker.join(timeout=30)
    with open_ledger(db) as restarted:
        assert restarted.get_call("run-1/0").state == "unknown"  # type: ignore[union-attr]
        assert isinstance(restarted.reserve(intent(1)), Unresolved)
        assert restarted.list_calls(state="sent") == []


def test_waiters_on_a_crashed_owner_are_released_with_unknown(
    open_at: Callable[..., SqliteLedger], intent: Intent, dead_owner: str
) -> None:
    crashed = open_at(owner=dead_owner, lease_s=3600)
    first = crashed.reserve(intent(0))
    assert isinstance(first, Fresh)
    crashed.mark_sent(first.call_id)
    waiter = open_at(recover=False)
    assert waiter.wait_for(first.call_id, timeout_s=30).state == "unknown"


def test_a_reconciled_success_replays_and_a_reconciled_failure_frees_the_key(
    ledger: SqliteLedger, intent: Intent
) -> None:
    a = ledger.reserve(intent(0, key="a"))
    b = ledger.reserve(intent(1, key="b"))
    assert isinstance(a, Fresh)
    assert isinstance(b, Fresh)
    for call in (a, b):
        ledger.mark_sent(call.call_id)
        ledger.mark_unknown(call.call_id, "timed out")
    ok = ledger.resolve(a.call_id, "succeeded", "note 7 exists in CRM", receipt="note-7")
    assert (ok.state, ok.receipt, ok.evidence) == ("reconciled_succeeded", "note-7", "note 7 exists in CRM")
    ledger.resolve(b.call_id, "failed", "no note in CRM")
    replay = ledger.reserve(intent(2, key="a"))
    assert isinstance(replay, Replay)
    assert isinstance(replay.outcome, ToolResult)
    assert replay.outcome.structured["receipt"] == "note-7"
    retry = ledger.reserve(intent(3, key="b"))
    assert isinstance(retry, Fresh)
    assert retry.attempt == 2
    assert ledger.unknown_calls() == []


def test_a_resolution_needs_evidence(ledger: SqliteLedger, intent: Intent) -> None:
    a = ledger.reserve(intent(0))
    assert isinstance(a, Fresh)
    ledger.mark_sent(a.call_id)
    ledger.mark_unknown(a.call_id, "timed out")
    with pytest.raises(Exception, match="evidence"):
        ledger.resolve(a.call_id, "failed", "   ")
