"""``codemode batch --plan``: a sample of a job's items is dry-run, nothing but reads is sent,
and the calls it would make are shown per tool with the shape of their arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compensation._notes import deploy_notes, write_toml

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROGRAM = """
from servers.notes import add_note, list_notes
before = list_notes()
add_note(text=f"item {INPUT['id']}")
"""


async def test_a_planned_batch_sends_no_write_and_shows_its_calls_per_tool(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    config = write_toml(notes, tmp_path / "codemode.toml")
    (tmp_path / "job.py").write_text(PROGRAM, encoding="utf-8")
    inputs = tmp_path / "items.jsonl"
    inputs.write_text("".join(json.dumps({"id": n}) + "\n" for n in range(50)), encoding="utf-8")

    command = [
        sys.executable,
        "-m",
        "codemode.cli",
        "batch",
        str(tmp_path / "job.py"),
        "--inputs",
        str(inputs),
    ]
    command += ["--key", "id", "--plan", "--sample", "3", "--json", "--config", str(config)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)

    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert (summary["items"], summary["sampled"], summary["failed"]) == (50, 3, {})
    assert summary["calls"] == [
        {"tool": "notes/add_note", "arguments": "text: string", "calls": 3, "items": 3}
    ]
    assert sorted(summary["plans"]) == ["0", "1", "2"]
    assert notes.held() == {}, "a planned batch writes nothing"

    human = subprocess.run(
        [*command[:-3], "--config", str(config)], capture_output=True, text=True, timeout=300, check=False
    )
    assert "notes/add_note" in human.stdout and "dry-ran 3 of 50 items" in human.stderr
