"""The life of one call: every state transition, replays, conflicts and what is refused."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from codemode.calls import CallFailed, ToolError, ToolResult
from codemode.ledger import (
    KEY_HOLDING,
    CallIntent,
    Conflict,
    Fresh,
    InFlight,
    LedgerStateError,
    Replay,
    SqliteLedger,
    Unresolved,
    arguments_digest,
    scoped_key,
)

Intent = Callable[..., CallIntent]


def fresh(ledger: SqliteLedger, intent: CallIntent) -> str:
    answer = ledger.reserve(intent)
    assert isinstance(answer, Fresh), answer
    return answer.call_id


def sent(ledger: SqliteLedger, intent: CallIntent) -> str:
    call_id = fresh(ledger, intent)
    ledger.mark_sent(call_id)
    return call_id


def test_a_reserved_call_is_recorded_before_sending_with_the_whole_execution_record(
    ledger: SqliteLedger, intent: Intent
) -> None:
    call_id = fresh(ledger, intent(resource_scope="write:crm/customer/42", approval_id="ap-1"))
    call = ledger.get_call(call_id)
    assert call is not None
    assert call.state == "reserved"
    assert (call.principal, call.tenant, call.server, call.tool) == ("alice", "acme", "crm", "add_note")
    assert call.trace_id == "trace-1"
    assert call.args_digest == arguments_digest({"customer_id": 42, "text": "hello"})
    assert call.arguments == {"customer_id": 42, "text": "hello"}
    assert call.resource_scope == "write:crm/customer/42"
    assert call.approval_id == "ap-1"
    assert call.idempotency_key == "acme:alice:crm:add_note:k1"
    assert call.owner == ledger.owner
    assert call.lease_expires_at is not None
    assert call.attempt == 1


def test_a_sent_call_that_succeeds_stores_result_and_receipt(ledger: SqliteLedger, intent: Intent) -> None:
    call_id = sent(ledger, intent())
    assert ledger.get_call(call_id).state == "sent"  # type: ignore[union-attr]
    done = ledger.complete(call_id, ToolResult(structured={"note_id": 7}), receipt="note-7")
    assert done.state == "succeeded"
    assert done.receipt == "note-7"
    assert done.outcome() == ToolResult(structured={"note_id": 7})
    assert done.lease_expires_at is None
    assert done.result_digest is not None
    assert done.result_digest.startswith("sha256:")
    assert [c.call_id for c in ledger.find_by_receipt("note-7")] == [call_id]


@pytest.mark.parametrize(
    "outcome",
    [ToolError(message="customer 42 is locked"), CallFailed(reason="invalid params: text too long")],
)
def test_a_tool_error_or_a_client_error_is_a_final_failure(
    ledger: SqliteLedger, intent: Intent, outcome: ToolError | CallFailed
) -> None:
    call_id = sent(ledger, intent())
    assert ledger.complete(call_id, outcome).state == "failed"


def test_the_same_key_and_arguments_replay_the_stored_first_result_without_a_new_call(
    ledger: SqliteLedger, intent: Intent
) -> None:
    first = sent(ledger, intent(0))
    ledger.complete(first, ToolResult(structured={"note_id": 7}))
    answer = ledger.reserve(intent(1, arguments={"text": "hello", "customer_id": 42}))  # other key order
    assert isinstance(answer, Replay)
    assert answer.original_call_id == first
    assert answer.outcome == ToolResult(structured={"note_id": 7})
    replayed = ledger.get_call(answer.call_id)
    assert replayed is not None
    assert replayed.state == "replayed"
    assert replayed.replay_of == first
    assert len(ledger.list_calls(state="sent")) == 0


def test_a_stored_error_is_replayed_too(ledger: SqliteLedger, intent: Intent) -> None:
    first = sent(ledger, intent(0))
    ledger.complete(first, ToolError(message="customer 42 is locked"))
    answer = ledger.reserve(intent(1))
    assert isinstance(answer, Replay)
    assert answer.outcome == ToolError(message="customer 42 is locked")


def test_the_same_key_with_other_arguments_is_a_conflict_recorded_as_denied(
    ledger: SqliteLedger, intent: Intent
) -> None:
    first = sent(ledger, intent(0))
    ledger.complete(first, ToolResult(structured={"note_id": 7}))
    answer = ledger.reserve(intent(1, arguments={"customer_id": 42, "text": "bye"}))
    assert isinstance(answer, Conflict)
    assert answer.existing_call_id == first
    denied = ledger.get_call(answer.call_id)
    assert denied is not None
    assert (denied.state, denied.gate) == ("denied", "side_effects")
    assert denied.sent_at is None


def test_a_conflict_is_reported_even_while_the_first_call_is_in_flight(
    ledger: SqliteLedger, intent: Intent
) -> None:
    sent(ledger, intent(0))
    assert isinstance(ledger.reserve(intent(1, arguments={"other": True})), Conflict)


def test_a_second_call_with_a_key_in_flight_is_told_to_wait_and_nothing_is_recorded(
    ledger: SqliteLedger, intent: Intent
) -> None:
    first = fresh(ledger, intent(0))
    answer = ledger.reserve(intent(1))
    assert isinstance(answer, InFlight)
    assert answer.call_id == first
    assert answer.owner == ledger.owner
    assert ledger.get_call("run-1/1") is None


def test_calls_without_a_key_are_never_deduplicated(ledger: SqliteLedger, intent: Intent) -> None:
    a = fresh(ledger, intent(0, key=None))
    b = fresh(ledger, intent(1, key=None))
    assert a != b
    assert ledger.get_call(a).idempotency_key is None  # type: ignore[union-attr]


def test_keys_are_scoped_per_tenant_principal_and_tool(ledger: SqliteLedger, intent: Intent) -> None:
    fresh(ledger, intent(0))
    assert isinstance(ledger.reserve(intent(1, tenant="other")), Fresh)
    assert isinstance(ledger.reserve(intent(2, principal="bob")), Fresh)
    assert isinstance(ledger.reserve(intent(3, tool="delete_note")), Fresh)
    assert isinstance(ledger.reserve(intent(4, server="crm2")), Fresh)


def test_the_scoped_key_encoding_is_injective() -> None:
    assert scoped_key("a:b", "c", "s", "t", "k") != scoped_key("a", "b:c", "s", "t", "k")
    assert scoped_key("a%3Ab", "c", "s", "t", "k") != scoped_key("a:b", "c", "s", "t", "k")


def test_a_refused_call_frees_its_key_and_the_retry_is_a_new_attempt(
    ledger: SqliteLedger, intent: Intent
) -> None:
    first = sent(ledger, intent(0))
    refused = ledger.mark_refused(first, "HTTP 429 Too Many Requests", retry_after_s=2)
    assert refused.state == "refused"
    assert refused.retry_after is not None
    again = ledger.reserve(intent(0))
    assert isinstance(again, Fresh)
    assert again.attempt == 2
    assert again.call_id == "run-1/0#2"


def test_a_call_refused_before_sending_can_be_retried(ledger: SqliteLedger, intent: Intent) -> None:
    first = fresh(ledger, intent(0))
    ledger.mark_refused(first, "server crm is not connected")
    assert isinstance(ledger.reserve(intent(1)), Fresh)


def test_an_abandoned_reservation_frees_its_key(ledger: SqliteLedger, intent: Intent) -> None:
    first = fresh(ledger, intent(0))
    assert ledger.mark_abandoned(first, "run cancelled").state == "abandoned"
    answer = ledger.reserve(intent(1))
    assert isinstance(answer, Fresh)
    assert answer.attempt == 2


def test_a_call_with_an_unknown_outcome_blocks_its_key_until_reconciled(
    ledger: SqliteLedger, intent: Intent
) -> None:
    first = sent(ledger, intent(0))
    assert ledger.mark_unknown(first, "timed out after 30 s").state == "unknown"
    answer = ledger.reserve(intent(1))
    assert isinstance(answer, Unresolved)
    assert answer.unknown_call_id == first
    assert ledger.get_call(answer.call_id).state == "denied"  # type: ignore[union-attr]
    assert [c.call_id for c in ledger.unknown_calls()] == [first]


def test_complete_with_an_unknown_failure_records_unknown(ledger: SqliteLedger, intent: Intent) -> None:
    first = sent(ledger, intent())
    done = ledger.complete(first, CallFailed(reason="stream lost", outcome_unknown=True))
    assert done.state == "unknown"


def test_a_late_answer_settles_an_unknown_call(ledger: SqliteLedger, intent: Intent) -> None:
    first = sent(ledger, intent(0))
    ledger.mark_unknown(first, "timed out")
    late = ledger.complete(first, ToolResult(structured={"note_id": 7}))
    assert late.state == "succeeded"
    assert late.resolved_by == "late answer"
    assert isinstance(ledger.reserve(intent(1)), Replay)


def test_a_gate_denial_is_recorded_never_sent_and_holds_no_key(ledger: SqliteLedger, intent: Intent) -> None:
    denied = ledger.mark_denied(intent(0), gate="consent", reason="high-impact call without approval")
    assert (denied.state, denied.gate, denied.reason) == (
        "denied",
        "consent",
        "high-impact call without approval",
    )
    assert isinstance(ledger.reserve(intent(0)), Fresh)


Action = Callable[[SqliteLedger, str], object]
ILLEGAL: list[tuple[str, Action]] = [
    ("reserved", lambda lg, c: lg.complete(c, ToolResult())),
    ("reserved", lambda lg, c: lg.mark_unknown(c, "x")),
    ("sent", lambda lg, c: lg.mark_sent(c)),
    ("sent", lambda lg, c: lg.mark_abandoned(c, "x")),
    ("succeeded", lambda lg, c: lg.complete(c, ToolResult())),
    ("succeeded", lambda lg, c: lg.mark_unknown(c, "x")),
    ("succeeded", lambda lg, c: lg.mark_refused(c, "x")),
    ("succeeded", lambda lg, c: lg.resolve(c, "failed", "looked")),
    ("sent", lambda lg, c: lg.resolve(c, "failed", "looked")),
]


@pytest.mark.parametrize(("prepare", "action"), ILLEGAL)
def test_illegal_transitions_are_refused_and_change_nothing(
    ledger: SqliteLedger, intent: Intent, prepare: str, action: Action
) -> None:
    call_id = fresh(ledger, intent())
    if prepare in ("sent", "succeeded"):
        ledger.mark_sent(call_id)
    if prepare == "succeeded":
        ledger.complete(call_id, ToolResult())
    head_before = ledger.head()
    with pytest.raises(LedgerStateError):
        action(ledger, call_id)
    assert ledger.head() == head_before
    assert ledger.get_call(call_id).state == prepare  # type: ignore[union-attr]


def test_unknown_call_ids_are_refused(ledger: SqliteLedger) -> None:
    with pytest.raises(LedgerStateError, match="no call"):
        ledger.mark_sent("nope")


def test_a_result_over_the_cap_is_stored_as_digest_size_and_a_stand_in(
    open_at: Callable[..., SqliteLedger], intent: Intent
) -> None:
    ledger = open_at(max_result_bytes=1000)
    call_id = sent(ledger, intent(0))
    done = ledger.complete(call_id, ToolResult(structured={"rows": ["x" * 100] * 100}))
    assert done.result_truncated
    assert done.result_bytes is not None
    assert done.result_bytes > 1000
    replay = ledger.reserve(intent(1))
    assert isinstance(replay, Replay)
    assert isinstance(replay.outcome, ToolResult)
    assert replay.outcome.truncated
    assert "exceeded the ledger cap" in str(replay.outcome.content[0].model_dump())


def test_arguments_can_be_kept_as_a_digest_only(open_at: Callable[..., SqliteLedger], intent: Intent) -> None:
    ledger = open_at(store_arguments=False)
    call = ledger.get_call(fresh(ledger, intent()))
    assert call is not None
    assert call.arguments is None
    assert call.args_digest.startswith("sha256:")


def test_runs_are_recorded_and_finished_once(ledger: SqliteLedger, binding: Any) -> None:
    run = ledger.begin_run(binding, "sha256:code")
    assert run.status == "running"
    done = ledger.finish_run(binding.run_id, "ok", {"calls": 3, "denials": 1})
    assert (done.status, done.summary) == ("ok", {"calls": 3, "denials": 1})
    with pytest.raises(LedgerStateError):
        ledger.finish_run(binding.run_id, "error")
    assert [r.run_id for r in ledger.list_runs()] == [binding.run_id]


def test_list_calls_filters_by_run_and_state(ledger: SqliteLedger, intent: Intent) -> None:
    a = sent(ledger, intent(0, key=None))
    ledger.complete(a, ToolResult())
    fresh(ledger, intent(1, key=None))
    fresh(ledger, intent(0, key=None, run_id="run-2", call_id="run-2/0"))
    assert {c.call_id for c in ledger.list_calls(run_id="run-1")} == {"run-1/0", "run-1/1"}
    assert [c.call_id for c in ledger.list_calls(state="succeeded")] == ["run-1/0"]
    assert len(ledger.list_calls(limit=1)) == 1


def _sql(ledger: SqliteLedger, query: str) -> list[Any]:
    with contextlib.closing(sqlite3.connect(ledger.location)) as conn:
        return conn.execute(query).fetchall()


def test_key_holding_states_match_the_unique_index(ledger: SqliteLedger) -> None:
    sql = _sql(ledger, "SELECT sql FROM sqlite_master WHERE name = 'calls_key_holder'")[0][0]
    assert {s for s in KEY_HOLDING if f"'{s}'" in sql} == set(KEY_HOLDING)
    assert sql.count("'") == 2 * len(KEY_HOLDING)


def test_every_table_column_is_known_to_the_reducer(ledger: SqliteLedger) -> None:
    from codemode.ledger._schema import COLUMNS

    for table, columns in COLUMNS.items():
        actual = [r[1] for r in _sql(ledger, f"PRAGMA table_info({table})")]
        assert actual == list(columns)


def test_reserve_can_record_the_send_in_the_same_transaction(ledger: SqliteLedger, intent: Intent) -> None:
    answer = ledger.reserve(intent(), send=True)
    assert isinstance(answer, Fresh)
    assert answer.sent
    call = ledger.get_call(answer.call_id)
    assert call is not None
    assert call.state == "sent"
    assert call.sent_at is not None
    assert [e.kind for e in ledger.events(answer.call_id)] == ["call_reserved", "call_sent"]
    assert ledger.complete(answer.call_id, ToolResult()).state == "succeeded"


def test_the_ledger_is_wal_and_fsyncs_every_commit_unless_told_otherwise(
    open_at: Callable[..., SqliteLedger],
) -> None:
    full = open_at()
    assert full.store.pragma("journal_mode") == "wal"
    assert full.store.pragma("synchronous") == 2  # FULL
    assert open_at(synchronous="normal").store.pragma("synchronous") == 1
