"""One key, many callers at once: exactly one of them sends, the others get its outcome.

The "server" here is a file the winner appends a line to; its line count is the number of
side effects. Threads share one ledger object or use their own; processes each open the file.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from codemode.calls import ToolResult
from codemode.ledger import (
    CallIntent,
    Fresh,
    InFlight,
    Replay,
    SqliteLedger,
    open_ledger,
    reserve_waiting,
)

Intent = Callable[..., CallIntent]
FORK = multiprocessing.get_context("fork")


def _one_call(ledger: SqliteLedger, intent: CallIntent, server_log: Path) -> tuple[str, Any]:
    """What the broker does for one call with a key: reserve; if told to wait, wait and reserve again."""
    first = ledger.reserve(intent)
    answer = first
    while isinstance(answer, InFlight):
        ledger.wait_for(answer.call_id, timeout_s=30)
        answer = ledger.reserve(intent)
    if isinstance(answer, Fresh):
        ledger.mark_sent(answer.call_id)
        with server_log.open("a") as log:  # the side effect
            log.write(f"{answer.call_id}\n")
        result = ToolResult(structured={"written_by": answer.call_id})
        ledger.complete(answer.call_id, result)
        return first.kind, result.model_dump()
    assert isinstance(answer, Replay), answer
    return first.kind, answer.outcome.model_dump()


@pytest.mark.parametrize("callers", [2, 8])
@pytest.mark.parametrize("shared", [True, False], ids=["one-ledger-object", "ledger-per-thread"])
def test_concurrent_threads_with_one_key_make_exactly_one_server_call(
    tmp_path: Path, intent: Intent, callers: int, shared: bool
) -> None:
    db, server_log = tmp_path / "ledger.db", tmp_path / "server.log"
    common = open_ledger(db)
    barrier = threading.Barrier(callers)
    results: list[tuple[str, Any]] = []
    errors: list[BaseException] = []

    def caller(n: int) -> None:
        ledger = common if shared else open_ledger(db)
        try:
            barrier.wait(timeout=30)
            results.append(_one_call(ledger, intent(n), server_log))
        except BaseException as exc:
            errors.append(exc)
        finally:
            if not shared:
                ledger.close()

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(server_log.read_text().splitlines()) == 1
    assert [kind for kind, _ in results].count("fresh") == 1
    assert len({str(outcome) for _, outcome in results}) == 1
    assert common.verify().ok
    common.close()


def _process_main(db: str, n: int, log: str, barrier: Any, queue: Any, intent_json: str) -> None:
    try:
        intent = CallIntent.model_validate_json(intent_json).model_copy(update={"call_id": f"run-1/{n}"})
        barrier.wait(timeout=30)
        ledger = open_ledger(db)
        queue.put(("ok", _one_call(ledger, intent, Path(log))))
        ledger.close()
    except BaseException as exc:  # report, never hang the parent
        queue.put(("error", repr(exc)))


@pytest.mark.integration
@pytest.mark.parametrize("callers", [2, 4])
def test_concurrent_processes_with_one_key_make_exactly_one_server_call(
    tmp_path: Path, intent: Intent, callers: int
) -> None:
    db, server_log = tmp_path / "ledger.db", tmp_path / "server.log"
    # No ledger file yet: the processes also race to create it.
    barrier = FORK.Barrier(callers)
    queue = FORK.Queue()
    processes = [
        FORK.Process(
            target=_process_main,
            args=(str(db), n, str(server_log), barrier, queue, intent(0).model_dump_json()),
        )
        for n in range(callers)
    ]
    for process in processes:
        process.start()
    reports = [queue.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    assert all(status == "ok" for status, _ in reports), reports
    results = [result for _, result in reports]
    assert len(server_log.read_text().splitlines()) == 1
    assert [kind for kind, _ in results].count("fresh") == 1
    assert len({str(outcome) for _, outcome in results}) == 1
    with open_ledger(db) as ledger:
        assert ledger.verify().ok
        assert len(ledger.list_calls(state="succeeded")) == 1
        assert len(ledger.list_calls(state="replayed")) == callers - 1


def _hold_key(db: str, intent_json: str, reserved: Any, release: Any, queue: Any) -> None:
    ledger = open_ledger(db)
    answer = ledger.reserve(CallIntent.model_validate_json(intent_json))
    assert isinstance(answer, Fresh)
    ledger.mark_sent(answer.call_id)
    reserved.set()
    release.wait(timeout=30)
    ledger.complete(answer.call_id, ToolResult(structured={"from": "other process"}))
    queue.put(answer.call_id)
    ledger.close()


@pytest.mark.integration
def test_a_key_held_by_another_live_process_is_in_flight_until_it_completes(
    tmp_path: Path, intent: Intent
) -> None:
    db = tmp_path / "ledger.db"
    open_ledger(db).close()
    reserved, release, queue = FORK.Event(), FORK.Event(), FORK.Queue()
    holder = FORK.Process(
        target=_hold_key, args=(str(db), intent(0).model_dump_json(), reserved, release, queue)
    )
    holder.start()
    try:
        assert reserved.wait(timeout=30)
        with open_ledger(db) as ledger:
            waiting = ledger.reserve(intent(1))
            assert isinstance(waiting, InFlight)
            assert ledger.wait_for(waiting.call_id, timeout_s=0.05).state == "sent"  # still running
            release.set()
            assert ledger.wait_for(waiting.call_id, timeout_s=30, poll_s=0.01).state == "succeeded"
            replay = ledger.reserve(intent(1))
            assert isinstance(replay, Replay)
            assert replay.outcome == ToolResult(structured={"from": "other process"})
    finally:
        release.set()
        holder.join(timeout=30)
    assert queue.get(timeout=5) == "run-1/0"


def test_wait_for_wakes_as_soon_as_a_thread_of_this_process_completes(
    ledger: SqliteLedger, intent: Intent
) -> None:
    first = ledger.reserve(intent(0))
    assert isinstance(first, Fresh)
    ledger.mark_sent(first.call_id)
    waiting = threading.Event()

    def complete_later() -> None:
        waiting.wait(timeout=30)
        ledger.complete(first.call_id, ToolResult(structured=1))

    thread = threading.Thread(target=complete_later)
    thread.start()
    waiting.set()
    # A long poll interval: only the in-process notification can make this return quickly.
    record = ledger.wait_for(first.call_id, timeout_s=30, poll_s=30)
    thread.join(timeout=30)
    assert record.state == "succeeded"


@pytest.mark.anyio
async def test_reserve_waiting_turns_an_in_flight_key_into_a_replay(
    ledger: SqliteLedger, intent: Intent
) -> None:
    first = ledger.reserve(intent(0))
    assert isinstance(first, Fresh)
    ledger.mark_sent(first.call_id)
    answers: list[Any] = []

    async def second_caller() -> None:
        answers.append(await reserve_waiting(ledger, intent(1), wait_s=30, poll_s=0.01))

    async with anyio.create_task_group() as tg:
        tg.start_soon(second_caller)
        await anyio.lowlevel.checkpoint()  # let it find the key in flight
        await anyio.to_thread.run_sync(ledger.complete, first.call_id, ToolResult(structured="done"))
    assert isinstance(answers[0], Replay)
    assert answers[0].outcome == ToolResult(structured="done")


@pytest.mark.anyio
async def test_reserve_waiting_gives_up_with_in_flight_after_its_wait(
    ledger: SqliteLedger, intent: Intent
) -> None:
    first = ledger.reserve(intent(0))
    assert isinstance(first, Fresh)
    answer = await reserve_waiting(ledger, intent(1), wait_s=0.05, poll_s=0.01)
    assert isinstance(answer, InFlight)
    assert answer.call_id == first.call_id
