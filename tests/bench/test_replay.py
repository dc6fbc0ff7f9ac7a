"""``bench tokens --replay FILE``: a recorded real-model run re-scored offline, with no API key,
no server and no sandbox. The shipped recording (``fixtures/replay``, recorded from the scripted
agents through the recording path: see its README) must replay to the tokens, answers, checks
and refraining it scored live, exactly; a file that does not replay as recorded says where."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codemode.cli._main import cli
from tests.bench._scripted_api import FIXTURE, NOTE, expected


def _replay(out: Path, replay: Path, *extra: str) -> Any:
    args = ["bench", "tokens", "--replay", str(replay), "--out", str(out), "--sizes", "", *extra]
    return CliRunner().invoke(cli, args)


def test_the_shipped_recording_replays_to_its_scores_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)  # offline: no key
    result = _replay(tmp_path, FIXTURE / "replay.jsonl")
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    recorded = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
    assert expected(results) == recorded
    # The no-tool tasks were scored on refraining, and both modes kept to what the answers need.
    assert {(r["task"], r["refrained"]) for r in results["runs"]} == {
        ("no_tool_arithmetic", True),
        ("no_tool_pasted_ticket", True),
        ("small_lookup", True),
    }
    assert results["agents"] == "anthropic:scripted-agents" and results["backend"] == "process"
    assert results["replay"]["note"] == NOTE
    # What only the live run could measure is taken as recorded, from the file's run lines.
    lines = [json.loads(line) for line in (FIXTURE / "replay.jsonl").read_text(encoding="utf-8").splitlines()]
    measured = {(r["task"], r["mode"]): r["measured"] for r in lines if r["kind"] == "run"}
    for run in results["runs"]:
        mine = measured[run["task"], run["mode"]]
        assert {name: run[name] for name in mine} == mine
    lookup = measured["small_lookup", "codemode"]
    assert lookup["mcp_calls"] == 1 and lookup["sandbox_cpu_s"] > 0 and lookup["broker_cpu_s"] > 0
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "recorded from the scripted agents through the recording path" in report


def test_a_replay_takes_no_option_its_recording_fixes(tmp_path: Path) -> None:
    result = _replay(tmp_path, FIXTURE / "replay.jsonl", "--model", "openai:gpt", "--backend", "docker")
    assert result.exit_code == 2
    assert "leave out --backend, --model" in result.output
    assert not (tmp_path / "results.json").exists()


Edit = Callable[[list[str]], list[str]]


def _edited(tmp_path: Path, edit: Edit) -> Path:
    lines = (FIXTURE / "replay.jsonl").read_text(encoding="utf-8").splitlines()
    path = tmp_path / "replay.jsonl"
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    return path


def _other_system(lines: list[str]) -> list[str]:
    first = json.loads(lines[1])
    first["request"]["system"] = "Be brief."
    return [lines[0], json.dumps(first), *lines[2:]]


def _broken_line(lines: list[str]) -> list[str]:
    return [lines[0], "{not json", *lines[1:]]


def _no_header(lines: list[str]) -> list[str]:
    return lines[1:]


def _empty(lines: list[str]) -> list[str]:
    return []


def _stopped_midway(lines: list[str]) -> list[str]:
    return [line for line in lines if '"kind":"run"' not in line]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            _other_system,
            "no_tool_arithmetic [direct] trial 0, request 1: it differs from the recorded one at "
            "the body.system",
        ),
        (_broken_line, "replay.jsonl line 2:"),
        (_no_header, "replay.jsonl line 1: a replay file starts with its header line"),
        (_empty, "is empty: a replay file is what `bench tokens --model` writes"),
        (_stopped_midway, "has no run line for no_tool_arithmetic [direct] trial 0: the recording stopped"),
    ],
)
def test_a_file_that_does_not_replay_as_recorded_says_where(tmp_path: Path, edit: Edit, message: str) -> None:
    result = _replay(tmp_path / "out", _edited(tmp_path, edit))
    assert result.exit_code == 1
    assert message in " ".join(result.output.split()), result.output
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_replay_of_tasks_it_does_not_hold_is_refused(tmp_path: Path) -> None:
    result = _replay(tmp_path, FIXTURE / "replay.jsonl", "--task", "branching")
    assert result.exit_code == 1
    assert "holds no run of branching" in result.output
