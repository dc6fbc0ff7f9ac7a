"""Records written after the fact (reads; outcomes under write_ahead): group commit, and crashes.

The contract suite (``contract/test_reads.py``) checks the records on every store; this file
checks the writer itself and the crash semantics: a process killed with reads still queued, or
in the middle of writing a batch, leaves no trace of them, its writes intact, and a ledger that
verifies.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import codemode.ledger._deferred as deferred_module
import codemode.ledger._reads as reads_module
from codemode.calls import ToolResult
from codemode.ledger import CallIntent, Fresh, ReadRecord, open_ledger
from codemode.ledger._deferred import Deferred, DeferredRecords
from tests.ledger.conftest import BINDING, make_intent

FORK = multiprocessing.get_context("fork")


def a_read(seq: int) -> ReadRecord:
    return ReadRecord(
        intent=make_intent(seq, key=None, tool="get_customer"), outcome=ToolResult(), elapsed_s=0.0
    )


def test_reads_queued_while_a_batch_is_written_go_in_the_next_batch_together() -> None:
    batches: list[int] = []
    first_started, release = threading.Event(), threading.Event()

    def write(batch: Sequence[Deferred]) -> None:
        batches.append(len(batch))
        if len(batches) == 1:
            first_started.set()
            release.wait(30)

    deferred = DeferredRecords(write)
    deferred.submit(a_read(0))
    assert first_started.wait(30)
    for seq in range(1, 11):
        deferred.submit(a_read(seq))
    assert deferred.pending == 11
    release.set()
    deferred.flush()
    assert batches == [1, 10], "one transaction for the ten reads that queued meanwhile"
    assert deferred.pending == 0
    deferred.close()
    with pytest.raises(RuntimeError, match="closed"):
        deferred.submit(a_read(99))


def test_a_batch_the_store_refuses_is_retried_one_record_at_a_time() -> None:
    written: list[str] = []

    def write(batch: Sequence[Deferred]) -> None:
        reads = [r for r in batch if isinstance(r, ReadRecord)]
        if any(r.intent.call_id.endswith("/2") for r in reads):
            raise OSError("disk full")
        written.extend(r.intent.call_id for r in reads)

    started = threading.Event()
    deferred = DeferredRecords(lambda batch: (started.wait(30), write(batch))[1])
    for seq in range(4):
        deferred.submit(a_read(seq))
    started.set()
    deferred.close()
    assert sorted(written) == [f"{BINDING.run_id}/{n}" for n in (0, 1, 3)]
    assert deferred.dropped == 1


def _write_then_die_reading(db: str, write_json: str, ready: Any, second_batch: bool) -> None:
    ledger = open_ledger(db)
    ledger.begin_run(BINDING, "digest")
    write = ledger.reserve(CallIntent.model_validate_json(write_json), send=True)
    assert isinstance(write, Fresh)
    ledger.complete(write.call_id, ToolResult(structured={"written": True}))
    if second_batch:
        ledger.record_read(a_read(1))
        ledger.list_calls()  # waits for it: the first batch commits
    real_new_call = reads_module.new_call
    emitted = 0

    def new_call(*args: Any, **kwargs: Any) -> Any:
        nonlocal emitted
        row = real_new_call(*args, **kwargs)
        emitted += 1
        if emitted == 5:
            ready.set()
            signal.pause()  # killed here, inside the batch's open transaction
        return row

    reads_module.new_call = new_call
    for seq in range(2, 50):
        ledger.record_read(a_read(seq))
    ledger.list_calls()  # hurries the writer instead of letting it linger
    signal.pause()


@pytest.mark.integration
@pytest.mark.parametrize(
    "second_batch", [False, True], ids=["killed-in-the-only-batch", "killed-in-the-second-batch"]
)
def test_a_process_killed_with_reads_unwritten_leaves_its_writes_and_a_ledger_that_verifies(
    tmp_path: Path, second_batch: bool
) -> None:
    db = tmp_path / "ledger.db"
    open_ledger(db).close()
    ready = FORK.Event()
    write = make_intent(0, key="write-1")
    child = FORK.Process(
        target=_write_then_die_reading, args=(str(db), write.model_dump_json(), ready, second_batch)
    )
    child.start()
    assert ready.wait(timeout=30)
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    with open_ledger(db) as restarted:
        calls = restarted.list_calls(limit=100, newest_first=False)
        # Killed inside the first batch: no read is there. Killed inside the second (48 reads,
        # four of them already emitted): only the first batch's one read is.
        committed = [f"{BINDING.run_id}/1"] if second_batch else []
        assert [c.call_id for c in calls] == [f"{BINDING.run_id}/0", *committed]
        assert {c.state for c in calls} == {"succeeded"}, "the write survives, no half-written read"
        assert [e.kind for e in restarted.events()].count("call_read") == len(committed)
        assert restarted.unknown_calls() == []
        assert restarted.get_run(BINDING.run_id).status == "interrupted"  # type: ignore[union-attr]
        assert restarted.verify().ok


@pytest.mark.timeout(10)  # a flush that did not hurry the writer would wait out its 60 s linger
def test_reads_gather_while_the_writer_lingers_and_a_flush_hurries_it() -> None:
    batches: list[int] = []
    deferred = DeferredRecords(lambda batch: batches.append(len(batch)), linger_s=60)
    for seq in range(3):
        deferred.submit(a_read(seq))
    deferred.flush()
    assert batches == [3]
    deferred.close()


def _queue_the_outcome_then_die(db: str, write_json: str, ready: Any) -> None:
    ledger = open_ledger(db)
    ledger.begin_run(BINDING, "digest")
    write = ledger.reserve(CallIntent.model_validate_json(write_json), send=True)
    assert isinstance(write, Fresh)

    def complete_in(*args: Any, **kwargs: Any) -> Any:
        ready.set()
        signal.pause()  # killed here, inside the batch's open transaction

    deferred_module.complete_in = complete_in
    ledger.complete_later(write.call_id, ToolResult(structured={"written": True}))
    ledger.list_calls()  # hurries the writer
    signal.pause()


@pytest.mark.integration
def test_a_process_killed_before_a_queued_outcome_commits_leaves_the_write_unknown_never_lost(
    tmp_path: Path,
) -> None:
    """``durability = "write_ahead"``: the outcome of an answered write is queued; a crash before
    it commits leaves the write to reconcile, as a crash during the call would."""
    db = tmp_path / "ledger.db"
    open_ledger(db).close()
    ready = FORK.Event()
    write = make_intent(0, key="write-1")
    child = FORK.Process(target=_queue_the_outcome_then_die, args=(str(db), write.model_dump_json(), ready))
    child.start()
    assert ready.wait(timeout=30)
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    with open_ledger(db) as restarted:  # recover=True
        [call] = restarted.list_calls()
        assert call.state == "unknown", "sent and not recorded as answered: to reconcile, never re-sent"
        assert [c.call_id for c in restarted.unknown_calls()] == [call.call_id]
        assert restarted.verify().ok
