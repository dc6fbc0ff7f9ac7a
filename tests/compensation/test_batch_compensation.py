"""A batch job whose verify program fails on some items, with --compensate: those items are
undone on the server, and the summary gives the compensation success rate next to the success
rate, exactly, listing the items whose compensation failed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codemode import CodeMode
from codemode.batch import BatchOptions
from tests.compensation._notes import deploy_notes, write_toml

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLI = [sys.executable, "-m", "codemode.cli"]

PROGRAM = """
from servers.notes import add_note
text = ("locked " if INPUT["locked"] else "") + f"item {INPUT['id']}"
add_note(text=text)["note_id"]
"""
CHECK = "INPUT['id'] % 10 != 0\n"
"""Fails on every tenth item: of 200, items 0, 10, ..., 190 (20 items) are unverified."""
ITEMS = 200


def _items(path: Path, count: int, locked: set[int]) -> Path:
    lines = [json.dumps({"id": n, "locked": n in locked}) for n in range(count)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def test_a_batch_compensates_its_unverified_items_and_reports_the_rate(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    config = write_toml(notes, tmp_path / "codemode.toml")
    (tmp_path / "program.py").write_text(PROGRAM)
    (tmp_path / "check.py").write_text(CHECK)
    # 200 items, 20 unverified; the notes of five of them are locked: their compensation fails.
    locked = {10, 50, 90, 130, 170}
    inputs = _items(tmp_path / "items.jsonl", ITEMS, locked=locked)
    batch = [*CLI, "batch", str(tmp_path / "program.py"), "--inputs", str(inputs), "--key", "id"]
    batch += ["--verify", str(tmp_path / "check.py"), "--compensate", "--config", str(config)]
    completed = subprocess.run([*batch, "--json"], capture_output=True, text=True, timeout=900, check=False)
    assert completed.returncode == 1, completed.stderr
    summary = json.loads(completed.stdout)
    assert summary["counts"]["done"] == 180 and summary["counts"]["unverified"] == 20
    assert summary["success_rate"] == 0.9
    failed = [str(n) for n in sorted(locked)]
    assert summary["compensation"] == {"needed": 20, "compensated": 15, "failed": failed, "rate": 0.75}
    held = sorted(notes.held().values())
    assert held == sorted(
        [f"item {n}" for n in range(ITEMS) if n % 10] + [f"locked item {n}" for n in locked]
    )
    # Run again: nothing left to run, nothing sent again, the same tally from the ledger.
    human = subprocess.run(batch, capture_output=True, text=True, timeout=900, check=False)
    assert "compensation success rate 75.0% (15 of the 20 items" in human.stdout, human.stdout + human.stderr
    assert f"compensation failed for 5 item(s): {', '.join(failed)}" in human.stdout
    assert len(notes.deletes()) == 20


async def test_every_compensation_succeeding_is_a_rate_of_100_percent(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    inputs = [{"id": n, "locked": False} for n in range(ITEMS)]
    options = BatchOptions(key="id", verify=CHECK, compensate=True, concurrency=4)
    async with CodeMode(notes.config) as engine:
        results = [r async for r in engine.batch(PROGRAM, inputs, options)]
    undone = {r.key: r.compensation for r in results if r.status != "done"}
    assert undone == {str(n): "compensated" for n in range(0, ITEMS, 10)}
    assert len(notes.held()) == 180


FAILS_ONCE = """
from servers.notes import add_note, list_notes
note = add_note(text="kept")["note_id"]
if "attempted" not in [n["text"] for n in list_notes()["notes"]]:
    add_note(text="attempted")  # what the next attempt reads: this one failed
    raise RuntimeError("a transient failure")
note
"""


async def test_an_item_that_fails_then_succeeds_on_retry_keeps_its_writes(tmp_path: Path) -> None:
    # [policy] compensate = "on_failure" undoes an item that ends failed, not an attempt that a
    # retry follows: the retry replays that attempt's writes from the ledger, it does not redo them.
    notes = await deploy_notes(tmp_path, policy={"compensate": "on_failure"})
    options = BatchOptions(key="id", compensate=True, concurrency=1)
    async with CodeMode(notes.config) as engine:
        [result] = [r async for r in engine.batch(FAILS_ONCE, [{"id": 1}], options)]
    assert (result.status, result.attempts, result.compensation) == ("done", 2, None), result.error
    assert sorted(notes.held().values()) == ["attempted", "kept"], "the item is done: its writes stay"
    assert notes.deletes() == []
