"""A failed run's side effects undone: on the notes server, through the broker, in the ledger."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import pytest

from codemode.engine import CodeMode, compensate_run, recorded_outcome
from codemode.ledger import open_ledger
from tests.compensation._notes import ADD_THREE_THEN_FAIL, deploy_notes

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_a_run_that_writes_three_notes_then_fails_is_compensated(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    async with notes.engine() as engine:
        result = await engine.run(ADD_THREE_THEN_FAIL, compensate=True)
        assert result.status == "error"
        assert notes.held() == {}  # the server holds none of the three notes
        assert result.outcome == "compensated"
        assert result.compensation is not None and result.compensation.sent == 3
        again = await compensate_run(engine, result.run_id)
    assert again.sent == 0 and again.outcome == "compensated"  # a second one is a no-op
    writes = notes.calls(result.run_id)
    assert [c.tool for c in writes] == ["add_note"] * 3
    ledger = open_ledger(notes.config.ledger_path, create=False)
    try:
        undone = ledger.compensations_of(c.call_id for c in writes)
        # One compensation per write, newest write first, each linked to the call it undoes.
        assert [c.compensates for c in undone] == [c.call_id for c in reversed(writes)]
        assert {(c.tool, c.state) for c in undone} == {("delete_note", "succeeded")}
        assert [c.arguments for c in undone] == [
            {"note_id": c.outcome().structured["note_id"]}  # type: ignore[union-attr]
            for c in reversed(writes)
        ]
        assert recorded_outcome(ledger, result.run_id, "error", None) == "compensated"
        assert ledger.verify().ok
    finally:
        ledger.close()


async def test_without_compensate_the_run_is_partial_and_its_effects_remain(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    async with notes.engine() as engine:
        result = await engine.run(ADD_THREE_THEN_FAIL, verify="RESULT")
        assert len(notes.held()) == 3
        assert result.outcome == "partial"
        assert result.compensation is not None and result.compensation.dry_run
        assert [e.status for e in result.compensation.effects] == ["would compensate"] * 3
        dry = await compensate_run(engine, result.run_id, dry_run=True)
        assert len(notes.held()) == 3 and dry.sent == 0


async def test_a_compensation_that_fails_is_reported_and_not_retried(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    program = (
        "from servers.notes import add_note\n"
        "add_note(text='fine')\nadd_note(text='locked by someone')\n"
        "raise RuntimeError('failed')\n"
    )
    async with notes.engine() as engine:
        result = await engine.run(program, compensate=True)
        assert result.outcome == "compensation failed"
        report = result.compensation
        assert report is not None
        assert [e.status for e in report.effects] == ["compensation failed", "compensated"]
        assert "locked" in (report.effects[0].detail or "")
        again = await compensate_run(engine, result.run_id)
    assert again.sent == 0  # never retried blindly
    assert [e.status for e in again.effects] == ["compensation failed", "compensated"]
    assert list(notes.held().values()) == ["locked by someone"]


async def test_a_write_without_a_declared_compensation_is_listed_not_compensable(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path, compensation={})
    async with notes.engine() as engine:
        result = await engine.run(ADD_THREE_THEN_FAIL, compensate=True)
    assert result.outcome == "partial"
    assert result.compensation is not None
    assert {e.status for e in result.compensation.effects} == {"not compensable"}
    assert len(notes.held()) == 3


async def test_a_denied_compensation_stands_failed_until_sent_again_once_allowed(tmp_path: Path) -> None:
    # Undoing needs consent here (delete_note is destructive), and the first engine has nobody to ask.
    notes = await deploy_notes(tmp_path, policy={"consent": {"never": ["notes/add_note"]}})
    async with CodeMode(notes.config) as engine:
        result = await engine.run(ADD_THREE_THEN_FAIL, compensate=True)
        assert result.outcome == "compensation failed"
        assert result.compensation is not None
        assert all("consent" in (e.detail or "") for e in result.compensation.effects)
    assert len(notes.held()) == 3 and notes.deletes() == []  # nothing reached the server
    ledger = open_ledger(notes.config.ledger_path, create=False)
    try:
        assert recorded_outcome(ledger, result.run_id, "error", None) == "compensation failed"
    finally:
        ledger.close()
    async with notes.engine() as engine:  # now someone approves
        again = await compensate_run(engine, result.run_id)
    assert (again.outcome, again.sent) == ("compensated", 3)
    assert notes.held() == {}


async def test_a_run_stopped_by_its_budget_is_compensated_by_policy(tmp_path: Path) -> None:
    # [policy] compensate = "on_failure" compensates without being asked per run; the budget
    # denies the third write, which fails the program after two completed ones.
    policy = {"compensate": "on_failure", "budget": {"calls_per_tool": {"notes/add_note": 2}}}
    notes = await deploy_notes(tmp_path, policy=policy)
    async with notes.engine() as engine:
        result = await engine.run(ADD_THREE_THEN_FAIL)
    assert result.status == "error" and result.denied == ("budget:notes/add_note",)
    assert result.outcome == "compensated"
    assert result.compensation is not None and result.compensation.sent == 2
    assert notes.held() == {}


async def test_a_cancelled_run_is_compensated(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    program = "import time\nfrom servers.notes import add_note\nadd_note(text='one')\ntime.sleep(600)\n"
    async with notes.engine() as engine:
        with anyio.CancelScope() as cancelled:
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(engine.run, program, compensate=True))
                # Cancelled once the write is done and recorded (not while it is in flight).
                while not any(c.state == "succeeded" for c in notes.calls()):
                    await anyio.sleep(0.05)
                cancelled.cancel()
        assert cancelled.cancelled_caught
    assert notes.held() == {}, "the cancelled run's write was undone"
    [write] = [c for c in notes.calls() if c.tool == "add_note"]
    ledger = open_ledger(notes.config.ledger_path, create=False)
    try:
        [undo] = ledger.compensations_of([write.call_id])
        assert (undo.tool, undo.state) == ("delete_note", "succeeded")
        run = ledger.get_run(write.run_id)
        assert run is not None and run.status == "interrupted"
        assert recorded_outcome(ledger, run.run_id, run.status, None) == "compensated"
    finally:
        ledger.close()
