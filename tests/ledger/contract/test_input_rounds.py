"""Input rounds relayed between serve replicas (issue 42), on every store: a round asked by one
replica is answered through another client of the store once, only by the caller who started the
run; the holder takes it and posts the outcome; an expired round or a silent holder is reported,
never waited on for ever; the ledger keeps a digest of the round's state, never the state."""

from __future__ import annotations

from datetime import timedelta

from codemode.ledger import StoreLedger, round_key
from codemode.testing import FakeClock
from tests.ledger.contract.conftest import MakeLedger, OpenClient

STATE = "run-token-secret.nonce-1"
KEY = round_key(STATE)


def _open(ledger: StoreLedger, clock: FakeClock, *, within_s: float = 60) -> None:
    expires = clock.now + timedelta(seconds=within_s)
    ledger.input_rounds.opened(KEY, principal="alice", tenant="acme", replica="a:1", expires_at=expires)


def test_a_round_answered_on_another_client_is_taken_once_and_its_outcome_posted(
    make_ledger: MakeLedger, clock: FakeClock
) -> None:
    holder, relay = make_ledger(), make_ledger()
    _open(holder, clock)
    assert (
        relay.input_rounds.answer(KEY, principal="alice", tenant="acme", answer_json='{"q":1}')[0]
        == "answered"
    )
    again = relay.input_rounds.answer(KEY, principal="alice", tenant="acme", answer_json='{"q":2}')
    assert again[0] == "closed", "an answer is written once"
    assert relay.input_rounds.progress(KEY)[0] == "waiting"
    assert [r.key for r in holder.input_rounds.answered("a:1")] == [KEY]
    assert holder.input_rounds.answered("b:1") == [], "only the holder's rounds"
    taken = holder.input_rounds.take(KEY)
    assert taken is not None and taken.answer_json == '{"q":1}'
    assert holder.input_rounds.take(KEY) is None, "taken once"
    holder.input_rounds.post(KEY, '{"outcome":1}')
    state, found = relay.input_rounds.progress(KEY)
    assert state == "done" and found is not None and found.outcome_json == '{"outcome":1}'
    kept = holder.input_rounds.get(KEY)
    assert kept is not None and (kept.answer_json, kept.outcome_json) == (None, None), (
        "neither the answer nor the result stays in the ledger once passed on"
    )
    assert holder.verify().ok, "the rounds are outside the hash chain"


def test_another_callers_answer_is_refused_like_an_unknown_round(
    make_ledger: MakeLedger, clock: FakeClock
) -> None:
    ledger = make_ledger()
    _open(ledger, clock)
    assert ledger.input_rounds.answer(KEY, principal="mallory", tenant="acme", answer_json="{}") == (
        "unknown",
        None,
    )
    assert ledger.input_rounds.answer(KEY, principal="alice", tenant="other", answer_json="{}") == (
        "unknown",
        None,
    )
    assert ledger.input_rounds.answer(
        round_key("x.y"), principal="alice", tenant="acme", answer_json="{}"
    ) == (
        "unknown",
        None,
    )
    found = ledger.input_rounds.get(KEY)
    assert found is not None and found.state == "open", "the refused answers changed nothing"


def test_the_holders_own_claim_closes_the_round_to_other_replicas(
    make_ledger: MakeLedger, clock: FakeClock
) -> None:
    holder, relay = make_ledger(), make_ledger()
    _open(holder, clock)
    assert holder.input_rounds.claim(KEY)
    assert relay.input_rounds.answer(KEY, principal="alice", tenant="acme", answer_json="{}")[0] == "closed"
    assert not holder.input_rounds.claim(KEY), "claimed once"
    assert holder.input_rounds.claim(round_key("never.recorded")), (
        "an unrecorded round is the holder's to judge"
    )


def test_an_expired_round_takes_no_answer_and_an_untaken_answer_expires(
    make_ledger: MakeLedger, clock: FakeClock
) -> None:
    holder, relay = make_ledger(), make_ledger()
    _open(holder, clock, within_s=10)
    relay.input_rounds.answer(KEY, principal="alice", tenant="acme", answer_json="{}")
    holder.input_rounds.beat([KEY])
    clock.advance(11)
    holder.input_rounds.beat([KEY])
    assert relay.input_rounds.progress(KEY)[0] == "expired"
    assert holder.input_rounds.take(KEY) is None, "an answer given up on is never taken later"
    assert relay.input_rounds.answer(KEY, principal="alice", tenant="acme", answer_json="{}")[0] == "closed"
    other = round_key("run-token-secret.nonce-2")
    holder.input_rounds.opened(other, principal="alice", tenant="acme", replica="a:1", expires_at=clock.now)
    assert (
        relay.input_rounds.answer(other, principal="alice", tenant="acme", answer_json="{}")[0] == "expired"
    )


def test_a_silent_holder_is_reported_gone_and_its_rounds_pruned_later(
    make_ledger: MakeLedger, clock: FakeClock
) -> None:
    holder, relay = make_ledger(), make_ledger()
    _open(holder, clock, within_s=600)
    relay.input_rounds.answer(KEY, principal="alice", tenant="acme", answer_json="{}")
    clock.advance(relay.input_rounds.holder_stale_s + 1)  # no beat since
    assert relay.input_rounds.progress(KEY)[0] == "holder-gone"
    holder.input_rounds.beat([KEY])
    assert relay.input_rounds.progress(KEY)[0] == "waiting", "a beat shows the holder alive"
    clock.advance(3601)
    assert holder.input_rounds.prune() == 1
    assert relay.input_rounds.progress(KEY) == ("gone", None)


def test_the_ledger_never_holds_the_request_state(
    connect: OpenClient, make_ledger: MakeLedger, clock: FakeClock
) -> None:
    store = connect()
    ledger = make_ledger(store)
    _open(ledger, clock)
    with store.transaction(write=False) as tx:
        row = tx.input_round(KEY)
    assert row is not None and KEY.startswith("sha256:")
    assert not any("secret" in str(value) for value in row.values())
