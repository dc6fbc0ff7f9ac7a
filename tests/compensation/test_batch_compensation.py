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
CHECK = "INPUT['id'] % 5 != 0\n"
"""Fails on every fifth item: items 0, 5, 10, ... are unverified."""


def _items(path: Path, count: int, locked: set[int]) -> Path:
    lines = [json.dumps({"id": n, "locked": n in locked}) for n in range(count)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def test_a_batch_compensates_its_unverified_items_and_reports_the_rate(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    config = write_toml(notes, tmp_path / "codemode.toml")
    (tmp_path / "program.py").write_text(PROGRAM)
    (tmp_path / "check.py").write_text(CHECK)
    # 20 items, 4 unverified (0, 5, 10, 15); the note of item 5 is locked: its compensation fails.
    inputs = _items(tmp_path / "items.jsonl", 20, locked={5})
    batch = [*CLI, "batch", str(tmp_path / "program.py"), "--inputs", str(inputs), "--key", "id"]
    batch += ["--verify", str(tmp_path / "check.py"), "--compensate", "--config", str(config)]
    completed = subprocess.run([*batch, "--json"], capture_output=True, text=True, timeout=600, check=False)
    assert completed.returncode == 1, completed.stderr
    summary = json.loads(completed.stdout)
    assert summary["counts"]["done"] == 16 and summary["counts"]["unverified"] == 4
    assert summary["success_rate"] == 0.8
    assert summary["compensation"] == {"needed": 4, "compensated": 3, "failed": ["5"], "rate": 0.75}
    held = sorted(notes.held().values())
    assert held == sorted([f"item {n}" for n in range(20) if n % 5] + ["locked item 5"])
    # Run again: nothing left to run, nothing sent again, the same tally from the ledger.
    human = subprocess.run(batch, capture_output=True, text=True, timeout=600, check=False)
    assert "compensation success rate 75.0% (3 of the 4 items" in human.stdout, human.stdout + human.stderr
    assert "compensation failed for 1 item(s): 5" in human.stdout
    assert len(notes.deletes()) == 4


async def test_every_compensation_succeeding_is_a_rate_of_100_percent(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    inputs = [{"id": n, "locked": False} for n in range(10)]
    options = BatchOptions(key="id", verify=CHECK, compensate=True, concurrency=2)
    async with CodeMode(notes.config) as engine:
        results = [r async for r in engine.batch(PROGRAM, inputs, options)]
    undone = {r.key: r.compensation for r in results if r.status != "done"}
    assert undone == {"0": "compensated", "5": "compensated"}
    assert len(notes.held()) == 8
