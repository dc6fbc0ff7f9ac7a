"""The ledger's promises, on every store: transitions, idempotency keys, claims, verify, recovery.

Every test builds a :class:`StoreLedger` on a client of the store under test, so the same rules
are checked whatever keeps the bytes.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest

from codemode.calls import CallFailed, RunBinding, ToolError, ToolResult
from codemode.ledger import (
    CALL_EVENTS,
    CALL_STATES,
    CALL_TRANSITIONS,
    CallIntent,
    Conflict,
    EventRow,
    Fresh,
    InFlight,
    LeaseLostError,
    LedgerStateError,
    Replay,
    StoreLedger,
    Unresolved,
)
from codemode.ledger._reduce import empty_row

Intent = Callable[..., CallIntent]
MakeLedger = Callable[..., StoreLedger]

# Each path drives one call through the public API; together they must walk every edge of
# CALL_TRANSITIONS (checked below), so the table and the operations cannot disagree.
Step = Callable[[StoreLedger, str], object]
PATHS: dict[str, list[tuple[str, Step]]] = {
    "succeeded": [
        ("sent", lambda lg, c: lg.mark_sent(c)),
        ("succeeded", lambda lg, c: lg.complete(c, ToolResult())),
    ],
    "failed": [
        ("sent", lambda lg, c: lg.mark_sent(c)),
        ("failed", lambda lg, c: lg.complete(c, ToolError(message="no"))),
    ],
    "refused after send": [
        ("sent", lambda lg, c: lg.mark_sent(c)),
        ("refused", lambda lg, c: lg.mark_refused(c, "429", retry_after_s=5)),
    ],
    "refused before send": [("refused", lambda lg, c: lg.mark_refused(c, "unreachable"))],
    "abandoned": [("abandoned", lambda lg, c: lg.mark_abandoned(c, "cancelled"))],
    "reconciled ok": [
        ("sent", lambda lg, c: lg.mark_sent(c)),
        ("unknown", lambda lg, c: lg.complete(c, CallFailed(reason="timeout", outcome_unknown=True))),
        ("reconciled_succeeded", lambda lg, c: lg.resolve(c, "succeeded", "seen in crm")),
    ],
    "reconciled failed": [
        ("sent", lambda lg, c: lg.mark_sent(c)),
        ("unknown", lambda lg, c: lg.mark_unknown(c, "timeout")),
        ("reconciled_failed", lambda lg, c: lg.resolve(c, "failed", "not in crm")),
    ],
    "late success": [
        ("sent", lambda lg, c: lg.mark_sent(c)),
        ("unknown", lambda lg, c: lg.mark_unknown(c, "timeout")),
        ("succeeded", lambda lg, c: lg.complete(c, ToolResult())),
    ],
    "late failure": [
        ("sent", lambda lg, c: lg.mark_sent(c)),
        ("unknown", lambda lg, c: lg.mark_unknown(c, "timeout")),
        ("failed", lambda lg, c: lg.complete(c, ToolError(message="late"))),
    ],
}

OPERATIONS: dict[str, Step] = {
    "call_sent": lambda lg, c: lg.mark_sent(c),
    "lease_extended": lambda lg, c: lg.extend_lease(c, 30),
    "call_input_answered": lambda lg, c: lg.record_input(c, {"kind": "elicitation", "action": "decline"}),
    "call_completed": lambda lg, c: lg.complete(c, ToolResult()),
    "call_refused": lambda lg, c: lg.mark_refused(c, "429"),
    "call_unknown": lambda lg, c: lg.mark_unknown(c, "timeout"),
    "call_abandoned": lambda lg, c: lg.mark_abandoned(c, "cancelled"),
    "call_reconciled": lambda lg, c: lg.resolve(c, "failed", "checked"),
}


def _edges() -> set[tuple[str, str]]:
    edges = {("reserved", state) for state, _ in (steps[0] for steps in PATHS.values())}
    for steps in PATHS.values():
        states = [state for state, _ in steps]
        edges |= set(itertools.pairwise(states))
    return edges


def test_the_paths_walk_every_transition_and_nothing_else() -> None:
    table = {(source, target) for source, targets in CALL_TRANSITIONS.items() for target in targets}
    assert _edges() == table
    created = {"call_reserved", "call_denied", "call_replayed", "call_read"}  # call_read: test_reads.py
    assert set(OPERATIONS) | created == set(CALL_EVENTS)


@pytest.mark.parametrize("path", list(PATHS))
def test_each_legal_path_moves_the_call_and_records_one_event_per_step(
    ledger: StoreLedger, intent: Intent, path: str
) -> None:
    reserved = ledger.reserve(intent(0, key="k"))
    assert isinstance(reserved, Fresh)
    for state, step in PATHS[path]:
        step(ledger, reserved.call_id)
        call = ledger.get_call(reserved.call_id)
        assert call is not None and call.state == state
    assert len(ledger.events(reserved.call_id)) == 1 + len(PATHS[path])
    assert ledger.verify().ok


def _reach(ledger: StoreLedger, intent: Intent, state: str, seq: int) -> str:
    """A call in ``state``, driven there through the API."""
    if state == "denied":
        return ledger.mark_denied(intent(seq, key=None), gate="policy", reason="no").call_id
    if state == "replayed":
        first = ledger.reserve(intent(seq, key=f"r{seq}"))
        assert isinstance(first, Fresh)
        ledger.mark_sent(first.call_id)
        ledger.complete(first.call_id, ToolResult())
        again = ledger.reserve(intent(seq + 1000, key=f"r{seq}"))
        assert isinstance(again, Replay)
        return again.call_id
    reserved = ledger.reserve(intent(seq, key=None))
    assert isinstance(reserved, Fresh)
    if state != "reserved":
        for path in PATHS.values():
            states = [s for s, _ in path]
            if state in states:
                for _, step in path[: states.index(state) + 1]:
                    step(ledger, reserved.call_id)
                break
    call = ledger.get_call(reserved.call_id)
    assert call is not None and call.state == state
    return reserved.call_id


@pytest.mark.parametrize("state", CALL_STATES)
def test_every_operation_not_allowed_from_a_state_is_refused_and_changes_nothing(
    ledger: StoreLedger, intent: Intent, state: str
) -> None:
    for n, (kind, operation) in enumerate(OPERATIONS.items()):
        if state in CALL_EVENTS[kind].sources:
            continue
        call_id = _reach(ledger, intent, state, 10 * n)
        before, head = ledger.get_call(call_id), ledger.head()
        with pytest.raises(LedgerStateError):
            operation(ledger, call_id)
        assert (ledger.get_call(call_id), ledger.head()) == (before, head), kind
    assert ledger.verify().ok


def test_a_key_replays_conflicts_stays_unresolved_and_frees_as_the_table_says(
    ledger: StoreLedger, intent: Intent
) -> None:
    first = ledger.reserve(intent(0, key="k"))
    assert isinstance(first, Fresh) and first.attempt == 1
    assert isinstance(ledger.reserve(intent(1, key="k")), InFlight)  # our own live lease
    ledger.mark_sent(first.call_id)
    ledger.complete(first.call_id, ToolResult(structured={"n": 1}))
    replay = ledger.reserve(intent(2, key="k"))
    assert isinstance(replay, Replay) and replay.outcome == ToolResult(structured={"n": 1})
    assert ledger.would_replay(intent(3, key="k"))
    conflict = ledger.reserve(intent(3, key="k", arguments={"other": True}))
    assert isinstance(conflict, Conflict) and conflict.existing_call_id == first.call_id
    # The same key in another scope (tool, principal, tenant) is another operation.
    for scope in ({"tool": "other"}, {"principal": "bob"}, {"tenant": "globex"}):
        other = ledger.reserve(intent(4, key="k", call_id=f"other/{scope}", **scope))
        assert isinstance(other, Fresh) and other.attempt == 1

    lost = ledger.reserve(intent(10, key="u"), send=True)
    assert isinstance(lost, Fresh) and lost.sent
    ledger.mark_unknown(lost.call_id, "timeout")
    blocked = ledger.reserve(intent(11, key="u"))
    assert isinstance(blocked, Unresolved) and blocked.unknown_call_id == lost.call_id
    ledger.resolve(lost.call_id, "failed", "not in crm")
    for attempt, free in enumerate(("refused", "abandoned"), start=2):
        retry = ledger.reserve(intent(11 + attempt, key="u"))
        assert isinstance(retry, Fresh) and retry.attempt == attempt
        if free == "refused":
            ledger.mark_refused(retry.call_id, "503")
        else:
            ledger.mark_abandoned(retry.call_id, "cancelled")
    last = ledger.reserve(intent(20, key="u"))
    assert isinstance(last, Fresh) and last.attempt == 4
    states = {c.state for c in ledger.list_calls(limit=1000)}
    assert {"replayed", "denied", "reconciled_failed", "refused", "abandoned"} <= states
    assert ledger.verify().ok


def test_clients_racing_for_one_key_make_exactly_one_claim(make_ledger: MakeLedger, intent: Intent) -> None:
    callers = 6
    ledgers = [make_ledger() for _ in range(callers)]
    barrier = threading.Barrier(callers)
    answers: dict[int, object] = {}
    errors: list[BaseException] = []

    def race(n: int) -> None:
        try:
            barrier.wait(timeout=60)
            answers[n] = ledgers[n].reserve(intent(n, key="once"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    winners = [n for n, answer in answers.items() if isinstance(answer, Fresh)]
    assert len(winners) == 1, answers
    won = answers[winners[0]]
    assert isinstance(won, Fresh)
    losers = [answer for n, answer in answers.items() if n != winners[0]]
    assert all(isinstance(a, InFlight) and a.call_id == won.call_id for a in losers), losers

    owner, waiter = ledgers[winners[0]], ledgers[(winners[0] + 1) % callers]
    owner.mark_sent(won.call_id)
    done = threading.Thread(target=lambda: owner.complete(won.call_id, ToolResult(structured={"w": 1})))
    done.start()
    settled = waiter.wait_for(won.call_id, 60, poll_s=0.01)
    done.join(timeout=60)
    assert settled.state == "succeeded"
    for n, each in enumerate(ledgers):
        again = each.reserve(intent(100 + n, key="once"))
        assert isinstance(again, Replay) and again.original_call_id == won.call_id
    assert ledgers[0].verify().ok


def test_an_expired_claim_is_settled_and_its_slow_owner_may_not_send(
    make_ledger: MakeLedger, intent: Intent, clock: Any
) -> None:
    slow, other = make_ledger(lease_s=10), make_ledger()
    reserved = slow.reserve(intent(0, key="a"))
    sent = slow.reserve(intent(1, key="b"), send=True)
    assert isinstance(reserved, Fresh) and isinstance(sent, Fresh)
    assert isinstance(other.reserve(intent(2, key="a")), InFlight)
    clock.advance(11)
    retry = other.reserve(intent(2, key="a"))
    assert isinstance(retry, Fresh) and retry.attempt == 2  # never sent: safe to run again
    assert isinstance(other.reserve(intent(3, key="b")), Unresolved)  # sent: must be reconciled
    with pytest.raises(LeaseLostError):
        slow.mark_sent(reserved.call_id)
    with pytest.raises(LedgerStateError):
        slow.extend_lease(sent.call_id, 30)
    assert other.verify().ok


def test_recovery_settles_a_dead_owners_calls_and_runs_and_spares_the_living(
    make_ledger: MakeLedger, intent: Intent, binding: RunBinding, dead_owner: str, clock: Any
) -> None:
    dead, alive = make_ledger(owner=dead_owner), make_ledger()
    dead.begin_run(binding, "sha256:code")
    reserved = dead.reserve(intent(0, key=None))
    sent = dead.reserve(intent(1, key=None), send=True)
    mine = alive.reserve(intent(2, key=None), send=True)
    assert isinstance(reserved, Fresh) and isinstance(sent, Fresh) and isinstance(mine, Fresh)
    report = alive.recover()
    assert report.calls_unknown == (sent.call_id,)
    assert report.calls_abandoned == (reserved.call_id,)
    assert report.runs_interrupted == (binding.run_id,)
    run = alive.get_run(binding.run_id)
    assert run is not None and run.status == "interrupted"
    assert alive.recover().calls_unknown == ()  # settled once
    clock.advance(10_000)  # our own lease, long expired: recovery settles it too
    assert alive.recover().calls_unknown == (mine.call_id,)
    assert [c.call_id for c in alive.unknown_calls()] == [sent.call_id, mine.call_id]
    assert alive.verify().ok


def test_verify_passes_a_clean_log_and_locates_each_kind_of_tampering(
    ledger: StoreLedger, intent: Intent, binding: RunBinding
) -> None:
    ledger.begin_run(binding, "sha256:code")
    ok = ledger.reserve(intent(0, key="a"), send=True)
    assert isinstance(ok, Fresh)
    ledger.complete(ok.call_id, ToolResult(structured={"n": 1}), receipt="r-1")
    ledger.mark_denied(intent(1, key=None), gate="policy", reason="no")
    ledger.finish_run(binding.run_id, "ok", {"calls": 2})
    clean = ledger.verify()
    assert clean.ok, clean.problems
    assert (clean.head_seq, clean.head_hash) == ledger.head()
    assert clean.events == len(ledger.events()) == clean.head_seq
    anchor = ledger.head()
    assert ledger.verify(anchor=anchor).ok
    assert {p.kind for p in ledger.verify(anchor=(anchor[0], "0" * 64)).problems} == {"anchor_mismatch"}

    store = ledger.store
    with store.transaction(write=True) as tx:  # edit a row behind the events' back
        tx.update("calls", ok.call_id, {"receipt": "r-forged"})
    edited = ledger.verify()
    assert [(p.kind, p.where) for p in edited.problems] == [
        ("row_edited", f"calls/{ok.call_id} column receipt")
    ]
    with store.transaction(write=True) as tx:
        tx.update("calls", ok.call_id, {"receipt": "r-1"})
        extra = empty_row("runs")
        extra.update(
            run_id="ghost",
            principal="p",
            tenant="t",
            trace_id="x",
            code_digest="d",
            status="ok",
            started_at="2026-01-01T00:00:00.000000Z",
        )
        tx.insert("runs", extra)
    assert {(p.kind, p.where) for p in ledger.verify().problems} == {("row_extra", "runs/ghost")}

    with store.transaction(write=True) as tx:  # an event that was never hashed into the chain
        head = tx.head()
        assert head is not None
        tx.append(
            EventRow(
                seq=head[0] + 1,
                at="2026-01-01T00:00:00.000000Z",
                kind="run_finished",
                subject="ghost",
                payload='{"status":"ok"}',
                prev_hash=head[1],
                hash="f" * 64,
            )
        )
    kinds = {p.kind for p in ledger.verify().problems}
    assert "event_edited" in kinds and "invalid_event" in kinds


def test_a_runs_record_keeps_what_the_run_cost(ledger: StoreLedger) -> None:
    """The engine's run record, as it writes it: the sandbox's usage and the broker's CPU, read
    back as written (a JSON record: no column to migrate)."""
    binding = RunBinding(run_id="run-cost", principal="alice", tenant="acme", trace_id="c" * 32)
    ledger.begin_run(binding, "sha256:code")
    usage = {
        "cpu_s": 1.0312,
        "peak_mb": 214.07,
        "channel_in_bytes": 1_049_000,
        "channel_out_bytes": 1_048_900,
        "cap_hit": "memory",
        "source": "cgroup",
    }
    summary = {"calls": 1, "denials": 0, "duration_ms": 1204.5, "usage": usage, "broker_cpu_s": 0.0021}
    ledger.finish_run(binding.run_id, "error", summary)
    record = ledger.get_run(binding.run_id)
    assert record is not None and record.summary == summary
    assert ledger.verify().ok


def test_run_values_lists_one_tenants_principals_and_statuses(ledger: StoreLedger) -> None:
    for n, (principal, tenant, status) in enumerate(
        [("alice", "acme", "ok"), ("carol", "globex", "timeout"), ("bob", "acme", None)]
    ):
        binding = RunBinding(run_id=f"run-{n}", principal=principal, tenant=tenant, trace_id=f"{n:032x}")
        ledger.begin_run(binding, "sha256:code")
        if status is not None:
            ledger.finish_run(binding.run_id, status)
    assert ledger.run_values("principal") == ["alice", "bob", "carol"]
    assert ledger.run_values("principal", "acme") == ["alice", "bob"]
    assert ledger.run_values("status", "acme") == ["ok", "running"]
    assert ledger.run_values("tenant", "globex") == ["globex"]
    assert ledger.run_values("status", "initech") == []


def test_runs_and_run_values_of_several_tenants_come_from_one_query(ledger: StoreLedger) -> None:
    tenants = ["acme", "globex", "acme", "initech", "globex", "x') OR ('1'='1"]
    for n, tenant in enumerate(tenants):
        binding = RunBinding(run_id=f"run-{n}", principal=f"p{n}", tenant=tenant, trace_id=f"{n:032x}")
        ledger.begin_run(binding, "sha256:code")
    two = ("acme", "globex")
    assert [r.run_id for r in ledger.list_runs(tenants=two)] == ["run-4", "run-2", "run-1", "run-0"]
    assert [r.run_id for r in ledger.list_runs(tenants=two, limit=3)] == ["run-4", "run-2", "run-1"]
    assert [r.run_id for r in ledger.list_runs(tenants=two, tenant="acme")] == ["run-2", "run-0"]
    assert [r.run_id for r in ledger.list_runs(tenants=("x') OR ('1'='1",))] == ["run-5"]
    assert ledger.list_runs(tenants=()) == []
    assert ledger.run_values("principal", tenants=two) == ["p0", "p1", "p2", "p4"]
    assert ledger.run_values("tenant", tenants=(*two, "nobody")) == ["acme", "globex"]
    assert ledger.run_values("status", tenants=()) == []
