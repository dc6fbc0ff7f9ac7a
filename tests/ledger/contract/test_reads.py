"""Read-only calls recorded after the fact (``record_read``), on every store.

A read is one ``call_read`` event that creates its row in its final state; records queued by
many threads all land, verify passes, and a run's end is recorded after its reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

from codemode.calls import CallFailed, ToolError, ToolResult
from codemode.ledger import CallIntent, Fresh, ReadRecord, StoreLedger
from tests.ledger.conftest import BINDING

Intent = Callable[..., CallIntent]


def read(intent: Intent, seq: int, **fields: object) -> ReadRecord:
    outcome = fields.pop("outcome", ToolResult(structured={"seq": seq}))
    return ReadRecord(intent=intent(seq, key=None, tool="get_customer"), outcome=outcome, **fields)  # type: ignore[arg-type]


def test_a_read_is_one_event_that_creates_its_row_in_its_final_state(
    ledger: StoreLedger, intent: Intent
) -> None:
    answer = {"kind": "elicitation", "action": "accept", "by": "alice", "digest": "sha256:00"}
    ledger.record_read(
        read(intent, 1, elapsed_s=0.25, receipt="r-1", filtered={"redacted": 0}, inputs=[answer])
    )
    call = ledger.get_call(f"{BINDING.run_id}/1")
    assert call is not None
    assert call.state == "succeeded"
    assert call.outcome() == ToolResult(structured={"seq": 1})
    assert call.receipt == "r-1"
    assert call.filter_report == {"redacted": 0}
    assert call.inputs == [{**answer, "at": "2026-01-01T12:00:00.000000Z"}], "stamped with the call's end"
    assert call.idempotency_key is None and call.lease_expires_at is None
    assert call.sent_at is not None and call.completed_at is not None
    assert call.completed_at - call.sent_at == timedelta(seconds=0.25)
    assert [e.kind for e in ledger.events(call.call_id)] == ["call_read"]
    assert ledger.verify().ok


def test_refused_and_failed_reads_keep_their_reason(ledger: StoreLedger, intent: Intent) -> None:
    ledger.record_read(read(intent, 1, outcome=None, elapsed_s=0.0, refused="HTTP 503", retry_after_s=5))
    ledger.record_read(read(intent, 2, outcome=ToolError(message="no such customer"), elapsed_s=0.0))
    ledger.record_read(read(intent, 3, outcome=CallFailed(reason="no answer"), elapsed_s=0.0))
    refused, tool_error, failed = (ledger.get_call(f"{BINDING.run_id}/{n}") for n in (1, 2, 3))
    assert refused is not None and refused.state == "refused" and refused.reason == "HTTP 503"
    assert refused.retry_after is not None
    assert tool_error is not None and tool_error.state == "failed"
    assert failed is not None and failed.state == "failed"
    assert failed.outcome() == CallFailed(reason="no answer")
    assert ledger.unknown_calls() == [], "a read without an answer has nothing to reconcile"
    assert ledger.verify().ok


def test_reads_queued_by_many_threads_all_land_once(ledger: StoreLedger, intent: Intent) -> None:
    def submit(start: int) -> None:
        for seq in range(start, start + 150):
            ledger.record_read(read(intent, seq, elapsed_s=0.001))

    threads = [threading.Thread(target=submit, args=(n * 1000,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    calls = ledger.list_calls(limit=1000)
    assert len(calls) == 600
    assert len({c.call_id for c in calls}) == 600
    assert {c.state for c in calls} == {"succeeded"}
    assert ledger.verify().ok


def test_a_retried_read_gets_the_next_free_call_id(ledger: StoreLedger, intent: Intent) -> None:
    ledger.record_read(read(intent, 1, outcome=None, elapsed_s=0.0, refused="HTTP 429"))
    ledger.record_read(read(intent, 1, elapsed_s=0.0))
    ids = {c.call_id: c.state for c in ledger.list_calls()}
    assert ids == {f"{BINDING.run_id}/1": "refused", f"{BINDING.run_id}/1#2": "succeeded"}


def test_the_end_of_a_run_is_recorded_after_its_reads(ledger: StoreLedger, intent: Intent) -> None:
    ledger.begin_run(BINDING, "digest")
    for seq in range(20):
        ledger.record_read(read(intent, seq, elapsed_s=0.0))
    ledger.finish_run(BINDING.run_id, "ok", {"calls": 20})
    kinds = [e.kind for e in ledger.events()]
    assert kinds.count("call_read") == 20
    assert kinds[-1] == "run_finished"


def test_a_record_the_store_refuses_is_dropped_alone(ledger: StoreLedger, intent: Intent) -> None:
    # model_copy does not validate: a row the reducer refuses (schema_hash is NOT NULL).
    broken = intent(2, key=None).model_copy(update={"schema_hash": None})
    bad = ReadRecord(intent=broken, outcome=ToolResult(), elapsed_s=0.0)
    ledger.record_read(read(intent, 1, elapsed_s=0.0))
    ledger.record_read(bad)
    ledger.record_read(read(intent, 3, elapsed_s=0.0))
    assert sorted(c.call_id for c in ledger.list_calls()) == [f"{BINDING.run_id}/1", f"{BINDING.run_id}/3"]
    assert ledger.verify().ok


def test_closing_the_ledger_writes_what_is_queued(
    make_ledger: Callable[..., StoreLedger], intent: Intent
) -> None:
    first = make_ledger()
    store = first.store
    for seq in range(50):
        first.record_read(read(intent, seq, elapsed_s=0.0))
    first._later.close()  # pyright: ignore[reportPrivateUsage]  (the store stays open for the check)
    second = make_ledger(store)
    assert len(second.list_calls(limit=100)) == 50


def test_an_outcome_queued_after_the_answer_completes_its_write(ledger: StoreLedger, intent: Intent) -> None:
    reserved = ledger.reserve(intent(7, key="k7"), send=True)
    assert isinstance(reserved, Fresh)
    ledger.complete_later(reserved.call_id, ToolResult(structured={"ok": True}), receipt="r-7")
    ledger.record_read(read(intent, 8, elapsed_s=0.0))  # one batch may hold both kinds
    call = ledger.get_call(reserved.call_id)
    assert call is not None and (call.state, call.receipt) == ("succeeded", "r-7")
    assert [e.kind for e in ledger.events(call.call_id)] == ["call_reserved", "call_sent", "call_completed"]
    assert ledger.verify().ok
