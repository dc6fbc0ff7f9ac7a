"""``codemode bench tokens`` reports the compensation success rate next to the success rate: of
a mode's runs that failed after side effects, those whose effects were all undone (read from the
ledger, as batch reads its items); n/a when no run needed it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from rich.console import Console

from codemode.bench import terminal_table
from codemode.bench._report import Prices, build_results, markdown, summarize
from codemode.bench._taskrun import TaskRun
from codemode.cli._main import cli
from tests.compensation._notes import ADD_THREE_THEN_FAIL, deploy_notes, write_toml


def _run(mode: str, needed: int, compensated: int) -> TaskRun:
    run = TaskRun(
        task="t", mode="codemode" if mode == "codemode" else "direct", passed=False, answer="", error=None
    )
    run.compensation_needed, run.compensated = needed, compensated
    return run


def test_the_rate_is_undone_of_needed_and_na_when_none_needed() -> None:
    runs = [_run("codemode", 1, 1), _run("codemode", 1, 0), _run("codemode", 2, 2), _run("direct", 0, 0)]
    summary = summarize(runs, Prices())
    assert (summary["codemode"]["compensation_needed"], summary["codemode"]["compensated"]) == (4, 3)
    assert summary["codemode"]["compensation_rate"] == 0.75
    assert summary["direct"]["compensation_rate"] is None
    results = build_results(
        runs=runs,
        kinds={},
        prices=Prices(),
        meta={
            "tokenizer": "t",
            "backend": "process",
            "agents": "scripted",
            "command": "c",
            "servers": {},
            "definition_tokens": {"direct": 0, "codemode": 0},
        },
        catalog=[],
        catalog_source="",
    )
    report = markdown(results)
    assert (
        "| compensation success (failed runs with side effects undone) | n/a (none needed) | 75.0% (3/4) |"
        in report
    )
    console = Console(width=300, record=True)
    console.print(terminal_table(results))
    printed = console.export_text()
    assert "0.0% / n/a (none needed)" in printed and "0.0% / 75.0% (3/4)" in printed


TASK = """
from codemode.bench import Final, assistant_turns, call, run_code, run_code_value, tool_results, turn

PROMPT = "Add the notes {texts}. Answer with how many notes you added."

def direct_agent(history):
    if assistant_turns(history) == 0:
        return turn(call("notes__add_note", text="direct"))
    return Final(1)

def codemode_agent(history):
    if assistant_turns(history) == 0:
        return run_code({program!r})
    return Final(run_code_value(tool_results(history)[0]))

def check(answer):
    return answer == 3
"""


@pytest.mark.integration
def test_a_failed_run_is_compensated_and_the_rate_reported(tmp_path: Path) -> None:
    """Two code-mode runs fail after writing: one's notes are deleted, the other's note is locked
    and its compensation fails, so code mode's rate is 50%; direct calls are not compensated."""
    notes = anyio.run(lambda: deploy_notes(tmp_path, policy={"compensate": "on_failure"}))
    config = write_toml(notes, tmp_path / "codemode.toml")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "undone.py").write_text(TASK.format(texts="one, two, three", program=ADD_THREE_THEN_FAIL))
    locked = (
        "from servers.notes import add_note\n"
        "add_note(text='locked')\n"
        "raise RuntimeError('the task failed after a write')\n"
    )
    (tasks / "stuck.py").write_text(TASK.format(texts="locked", program=locked))
    out = tmp_path / "out"
    args = ["bench", "tokens", "--tasks", str(tasks), "--config", str(config), "--out", str(out)]
    shown = CliRunner().invoke(cli, [*args, "--sizes", "", "--json"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    results: dict[str, Any] = json.loads(shown.output)
    code, direct = results["summary"]["codemode"], results["summary"]["direct"]
    assert (code["compensation_needed"], code["compensated"], code["compensation_rate"]) == (2, 1, 0.5)
    assert (direct["compensation_needed"], direct["compensation_rate"]) == (0, None)
    by_task = {r["task"]: r for r in results["runs"] if r["mode"] == "codemode"}
    assert by_task["undone"]["compensation_rate"] == 1.0 and by_task["stuck"]["compensation_rate"] == 0.0
    assert sorted(notes.held().values()) == ["direct", "direct", "locked"]  # the three are gone
    report = (out / "report.md").read_text(encoding="utf-8")
    assert (
        "| compensation success (failed runs with side effects undone) | n/a (none needed) | 50.0% (1/2) |"
        in report
    )
