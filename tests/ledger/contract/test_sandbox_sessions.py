"""Which replica holds each sandbox session, on every store: a claim is one write (of replicas
racing for a new id exactly one wins, the others read the winner), a close releases the row for
any replica, a holder whose lease ran out or whose process is gone no longer holds it, and every
row is re-derived exactly by ``verify``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from codemode.errors import LedgerError
from codemode.ledger import SessionClaim, StoreLedger
from tests.ledger.contract.conftest import MakeLedger, OpenClient

WHO = ("acme", "alice", "ses_1")
HOLD_S = 60.0


def _claim(ledger: StoreLedger, replica: str, *, who: tuple[str, str, str] = WHO) -> SessionClaim:
    return ledger.sandbox_sessions.claim(*who, replica=replica, hold_s=HOLD_S)


def test_a_claim_holds_the_session_against_another_replica(
    connect: OpenClient, make_ledger: MakeLedger
) -> None:
    a, b = make_ledger(connect()), make_ledger(connect())
    won = _claim(a, "replica-a")
    assert won.claimed and (won.holder.replica, won.holder.session_id) == ("replica-a", "ses_1")
    lost = _claim(b, "replica-b")
    assert not lost.claimed and lost.holder == won.holder, "the loser reads the holder, unchanged"
    assert b.sandbox_sessions.release(*WHO, replica="replica-b") is False, "only the holder releases"
    assert b.sandbox_sessions.find(*WHO) == won.holder
    # The same id of another principal or tenant is another session.
    assert _claim(b, "replica-b", who=("acme", "bob", "ses_1")).claimed
    assert _claim(b, "replica-b", who=("globex", "alice", "ses_1")).claimed


def test_the_same_owner_under_another_replica_name_is_another_holder(ledger: StoreLedger) -> None:
    assert _claim(ledger, "replica-a").claimed
    assert not _claim(ledger, "replica-b").claimed


def test_the_holder_claims_again_and_its_lease_moves_on(ledger: StoreLedger, clock: Any) -> None:
    first = _claim(ledger, "replica-a")
    clock.advance(30)
    again = _claim(ledger, "replica-a")
    assert again.claimed and again.holder.opened_at == first.holder.opened_at
    assert again.holder.last_used > first.holder.last_used
    assert again.holder.lease_expires_at > first.holder.lease_expires_at


def test_a_closed_session_may_be_opened_anywhere(
    connect: OpenClient, make_ledger: MakeLedger, clock: Any
) -> None:
    a, b = make_ledger(connect()), make_ledger(connect())
    assert _claim(a, "replica-a").claimed
    assert a.sandbox_sessions.release(*WHO, replica="replica-a")
    assert a.sandbox_sessions.release(*WHO, replica="replica-a") is False, "released once"
    closed = b.sandbox_sessions.find(*WHO)
    assert closed is not None and closed.closed_at is not None
    clock.advance(1)
    taken = _claim(b, "replica-b")
    assert taken.claimed and taken.holder.replica == "replica-b" and taken.holder.closed_at is None
    assert not _claim(a, "replica-a").claimed, "now b holds it"
    kinds = [event.kind for event in a.events()]
    assert kinds == ["sandbox_session_opened", "sandbox_session_closed", "sandbox_session_reopened"]
    report = a.verify()
    assert report.ok, report.problems


def test_a_holder_whose_lease_ran_out_holds_nothing(
    connect: OpenClient, make_ledger: MakeLedger, clock: Any
) -> None:
    a, b = make_ledger(connect()), make_ledger(connect())
    assert _claim(a, "replica-a").claimed
    clock.advance(HOLD_S - 1)
    assert not _claim(b, "replica-b").claimed, "within its lease"
    clock.advance(1)
    taken = _claim(b, "replica-b")
    assert taken.claimed and taken.holder.replica == "replica-b"
    # The old holder, back, finds it taken: it must not serve the session any more.
    lost = _claim(a, "replica-a")
    assert not lost.claimed and lost.holder.replica == "replica-b"
    assert a.sandbox_sessions.release(*WHO, replica="replica-a") is False
    assert a.verify().ok


def test_a_dead_holders_session_is_taken_over_at_once(make_ledger: MakeLedger, dead_owner: str) -> None:
    dead, alive = make_ledger(owner=dead_owner), make_ledger()
    assert _claim(dead, "replica-a").claimed
    taken = _claim(alive, "replica-b")
    assert taken.claimed and taken.holder.replica == "replica-b", "its process is gone: no lease to wait for"


def test_replicas_racing_for_a_new_session_make_exactly_one_claim(make_ledger: MakeLedger) -> None:
    callers = 6
    ledgers = [make_ledger() for _ in range(callers)]
    barrier = threading.Barrier(callers)
    answers: dict[int, SessionClaim] = {}
    errors: list[BaseException] = []

    def race(n: int) -> None:
        try:
            barrier.wait(timeout=60)
            answers[n] = _claim(ledgers[n], f"replica-{n}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    winners = [n for n, answer in answers.items() if answer.claimed]
    assert len(winners) == 1, answers
    assert all(a.holder.replica == f"replica-{winners[0]}" for a in answers.values())
    assert [e.kind for e in ledgers[0].events()] == ["sandbox_session_opened"]
    assert ledgers[0].verify().ok


@pytest.mark.parametrize(
    ("who", "replica", "hold_s", "match"),
    [
        (("acme", "alice", ""), "r", HOLD_S, "session id must not be empty"),
        (WHO, "", HOLD_S, "replica name must not be empty"),
        (WHO, "r", 0.0, "lease must be positive"),
    ],
)
def test_bad_claims_are_refused_and_write_nothing(
    ledger: StoreLedger, who: tuple[str, str, str], replica: str, hold_s: float, match: str
) -> None:
    with pytest.raises(LedgerError, match=match):
        ledger.sandbox_sessions.claim(*who, replica=replica, hold_s=hold_s)
    assert list(ledger.events()) == []
