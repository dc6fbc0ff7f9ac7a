"""``codemode bench tokens`` on the real example servers: structure of the outputs, both modes
really executed (counted in the ledger), and token figures that add up across turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from codemode.bench._accounting import MESSAGE_OVERHEAD, TiktokenTokenizer
from codemode.bench._runner import SYSTEM
from codemode.bench._suite import run_suite, sync_and_approve, write_demo_config
from codemode.bench._tasks import load_tasks
from codemode.cli._main import cli
from codemode.config import demo_servers, load_config
from codemode.ledger import open_ledger

TASKS = ("branching", "no_tool_arithmetic", "no_tool_pasted_ticket", "small_lookup")
# MCP calls each task makes (the same in both modes: the work is the same, only who does it differs).
MCP_CALLS = {"branching": 2, "no_tool_arithmetic": 0, "no_tool_pasted_ticket": 0, "small_lookup": 1}
NO_TOOL = ("no_tool_arithmetic", "no_tool_pasted_ticket")


@pytest.fixture(scope="module")
def bench_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    args = ["bench", "tokens", "--out", str(out), "--backend", "process", "--sizes", "40,200"]
    for task in TASKS:
        args += ["--task", task]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


def _results(out: Path) -> dict[str, Any]:
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_writes_every_output(bench_out: Path) -> None:
    results = _results(bench_out)
    assert {"summary", "tasks", "runs", "catalog", "definition_tokens", "command", "date"} <= set(results)
    assert [t["task"] for t in results["tasks"]] == sorted(TASKS)
    report = (bench_out / "report.md").read_text(encoding="utf-8")
    for heading in (
        "## Per task",
        "## Per mode",
        "## Failures",
        "## Where direct calling wins",
        "## Catalog scale",
        "## Per task and mode: time, resources and calls",
    ):
        assert heading in report
    assert "codemode bench tokens --out" in report and "--backend process" in report
    assert "--json" not in results["command"]
    charts = ["tokens_per_task.png", "tokens_vs_catalog.png", "cost_vs_catalog.png"]
    for chart in charts:
        assert (bench_out / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results["charts"] == charts


def test_both_modes_executed_and_solved(bench_out: Path) -> None:
    runs = _results(bench_out)["runs"]
    assert sorted((r["task"], r["mode"]) for r in runs) == sorted(
        (t, m) for t in TASKS for m in ("direct", "codemode")
    )
    for run in runs:
        assert run["passed"], run
        assert run["mcp_calls"] == MCP_CALLS[run["task"]], run
        if run["mode"] == "direct":
            assert run["tool_calls"] == run["mcp_calls"]  # every model call was one real MCP call
        elif run["task"] not in NO_TOOL:
            assert run["sandbox_peak_mb"] > 0  # a sandbox process really ran


def test_every_cost_of_a_run_is_reported(bench_out: Path) -> None:
    """Per task and mode: what the sandbox and the broker used (from each run's own
    accounting), where the wall time went, and what the gates made of the calls."""
    for run in _results(bench_out)["runs"]:
        split = run["model_s"] + run["discovery_s"] + run["execution_s"]
        assert split <= run["wall_s"] + 3e-6, run  # the parts, each rounded, within the whole
        if run["task"] in NO_TOOL or run["mode"] == "direct":
            # No sandbox ran: it cost nothing (a measurement, not an unknown).
            assert (run["sandbox_cpu_s"], run["sandbox_peak_mb"]) == (0.0, 0.0), run
            assert (run["channel_in_bytes"], run["channel_out_bytes"]) == (0, 0), run
            assert run["discovery_s"] == 0.0
            assert run["broker_cpu_s"] == (0.0 if run["mode"] == "codemode" else None)
        else:
            assert run["sandbox_cpu_s"] > 0 and run["sandbox_peak_mb"] > 0, run
            # In: the program, its stub modules and the tool results; out: the calls and the result.
            assert run["channel_in_bytes"] > len(run["task"]) and run["channel_out_bytes"] > 0, run
            assert run["broker_cpu_s"] > 0, run
            assert run["discovery_s"] > 0 and run["execution_s"] > 0, run  # search_tools, then run_code
        assert run["caps_hit"] == []
        if run["task"] in NO_TOOL:
            assert run["execution_s"] == 0.0 and run["tool_calls"] == 0, run
            assert run["valid_call_rate"] is None and run["schema_pass_rate"] is None  # nothing to rate
        else:
            assert run["valid_call_rate"] == 1.0 and run["schema_pass_rate"] == 1.0, run
            assert run["calls_denied"] == 0 and run["denied"] == {}
        assert run["refrained"] is (True if run["task"] in (*NO_TOOL, "small_lookup") else None), run
    summary = _results(bench_out)["summary"]
    assert summary["codemode"]["sandbox_cpu_s"] > 0 and summary["direct"]["sandbox_cpu_s"] == 0.0
    for mode in ("direct", "codemode"):
        assert (summary[mode]["refrained"], summary[mode]["refrain_scored"]) == (3, 3)
        assert summary[mode]["valid_call_rate"] == 1.0
    report = (bench_out / "report.md").read_text(encoding="utf-8")
    assert "| no_tool_arithmetic | code mode |" in report
    assert "| refrained (tasks that need no or one call) | 3/3 | 3/3 |" in report


def test_numbers_add_up_across_turns(bench_out: Path) -> None:
    results = _results(bench_out)
    tokenizer = TiktokenTokenizer()
    system = tokenizer.count(SYSTEM)
    for run in results["runs"]:
        turns = run["turns"]
        assert run["input_tokens"] == sum(t["input_tokens"] for t in turns)
        assert run["output_tokens"] == sum(t["output_tokens"] for t in turns)
        assert run["tool_calls"] == sum(t["tool_calls"] for t in turns)
        defs = results["definition_tokens"][run["mode"]]
        history = 0
        for turn in turns:
            parts = turn["breakdown"]
            assert turn["input_tokens"] == parts["system"] + parts["tools"] + parts["history"]
            assert parts["system"] == system and parts["tools"] == defs  # re-sent every turn
            assert parts["history"] > history  # the whole conversation, growing
            history = parts["history"]
        prompt = next(t for t in load_tasks(only=[run["task"]])).prompt
        assert turns[0]["breakdown"]["history"] == tokenizer.count(f"user\n{prompt}") + MESSAGE_OVERHEAD
    for mode, summary in results["summary"].items():
        mine = [r for r in results["runs"] if r["mode"] == mode]
        assert summary["input_tokens"] == sum(r["input_tokens"] for r in mine)
        assert summary["total_tokens"] == summary["input_tokens"] + summary["output_tokens"]
        assert summary["turns"] == sum(len(r["turns"]) for r in mine)
    base = results["catalog"]["points"][0]
    assert base["tools"] == results["tools"] == 20
    assert base["direct_tokens"] == results["summary"]["direct"]["total_tokens"]
    assert base["codemode_tokens"] == results["summary"]["codemode"]["total_tokens"]
    sizes = [p["tools"] for p in results["catalog"]["points"]]
    assert sizes == [20, 40, 200]
    direct = [p["direct_definition_tokens"] for p in results["catalog"]["points"]]
    assert direct == sorted(direct) and direct[-1] > 5 * direct[0]
    for point in results["catalog"]["points"]:
        assert set(point["quality"]) == {"recall@1", "recall@3", "recall@5", "mrr"}


@pytest.mark.integration
def test_calls_are_in_the_ledger(tmp_path: Path) -> None:
    """Both modes' tool calls are real MCP calls recorded by the broker in codemode's ledger."""
    config = write_demo_config(tmp_path, dict(demo_servers()))
    tasks = load_tasks(only=["branching"])
    suite = anyio.run(lambda: run_suite(config, tasks, tokenizer=TiktokenTokenizer(), backend="process"))
    ledger = open_ledger(tmp_path / "codemode.db")
    try:
        calls = ledger.list_calls(limit=1000)
    finally:
        ledger.close()
    assert len(calls) == sum(r.mcp_calls for r in suite.runs) == 4
    assert sorted(c.tool for c in calls) == ["add_note", "add_note", "get_ticket", "get_ticket"]


@pytest.mark.integration
def test_a_failed_check_is_reported_not_dropped(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    source = (Path(load_tasks(only=["small_lookup"])[0].path)).read_text(encoding="utf-8")
    (tasks / "wrong.py").write_text(
        source.replace("return answer == 1", "return answer == 2"), encoding="utf-8"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli,
        ["bench", "tokens", "--tasks", str(tasks), "--out", str(out), "--backend", "process", "--sizes", ""],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    results = _results(out)
    assert [r["passed"] for r in results["runs"]] == [False, False]
    assert results["summary"]["direct"]["cost_per_success_usd"] is None
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "- wrong [direct]: check failed; answer: `1`" in report
    assert "- wrong [codemode]: check failed; answer: `1`" in report


@pytest.mark.integration
def test_personal_data_moves_only_inside_a_program(tmp_path: Path) -> None:
    """Both modes see placeholders, never the email. Inside one program the broker maps the
    placeholder back, so the ticket gets the real email; a direct call is a run of its own, the
    placeholder means nothing there, and its text is what gets stored: reported as failed."""
    config = write_demo_config(tmp_path, dict(demo_servers()))
    tasks = load_tasks(only=["pii_between_servers"])
    suite = anyio.run(lambda: run_suite(config, tasks, tokenizer=TiktokenTokenizer(), backend="process"))
    outcome = {r.mode: r for r in suite.runs}
    assert outcome["codemode"].passed, outcome["codemode"]
    assert not outcome["direct"].passed and outcome["direct"].error == "check failed"
    answer = json.loads(outcome["direct"].answer)
    assert answer["sent"].split(": ", 1)[1].split(",")[0] == answer["stored"].split(": ", 1)[1].split(",")[0]
    assert "<pii:email:" in answer["stored"]


@pytest.mark.integration
def test_own_tasks_against_own_config(tmp_path: Path) -> None:
    """--tasks + --config: the user's task files against the user's servers and approved pins."""
    config = write_demo_config(tmp_path, dict(demo_servers()))
    anyio.run(lambda: sync_and_approve(load_config(config)))  # what `codemode sync` + `pin --approve` do
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    source = load_tasks(only=["small_lookup"])[0].path.read_text(encoding="utf-8")
    (tasks / "my_lookup.py").write_text(source, encoding="utf-8")
    out = tmp_path / "out"
    args = ["bench", "tokens", "--tasks", str(tasks), "--config", str(config), "--out", str(out)]
    result = CliRunner().invoke(cli, [*args, "--backend", "process", "--sizes", "", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert [(r["task"], r["passed"]) for r in printed["runs"]] == [("my_lookup", True), ("my_lookup", True)]
    ledger = open_ledger(tmp_path / "codemode.db")  # the user's own ledger, beside their config
    try:
        assert len(ledger.list_calls(limit=100)) == 2
    finally:
        ledger.close()


def test_missing_api_key_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["bench", "tokens", "--model", "openai:gpt-test", "--out", str(tmp_path)],
        env={"OPENAI_API_KEY": ""},
    )
    assert result.exit_code == 1
    assert "needs OPENAI_API_KEY" in result.output
