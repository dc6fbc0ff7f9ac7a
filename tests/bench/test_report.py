"""The benchmark's tables never turn a failed mode's tokens into a saving, and the bundled suite
refuses a config without its example servers before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from codemode.bench import terminal_table
from codemode.bench._report import markdown, task_rows
from codemode.cli._main import cli


def _mode(total: int, passed: int, runs: int = 1) -> dict[str, Any]:
    return {
        "runs": runs,
        "passed": passed,
        "success_rate": passed / runs,
        "compensation_needed": 0,
        "compensated": 0,
        "compensation_rate": None,
        "input_tokens": total,
        "output_tokens": 0,
        "total_tokens": total,
        "cost_usd": 0.0,
        "cost_per_success_usd": None,
        "turns": 1,
        "tool_calls": 1,
        "mcp_calls": 1,
        "calls_denied": 0,
        "denied": {},
        "valid_call_rate": 1.0,
        "schema_pass_rate": 1.0,
        "refrain_scored": 0,
        "refrained": 0,
        "wall_s": 0.1,
        "model_s": 0.05,
        "discovery_s": 0.0,
        "execution_s": 0.05,
        "sandbox_cpu_s": 0.02,
        "sandbox_peak_mb": 30.0,
        "channel_in_bytes": 4096,
        "channel_out_bytes": 1024,
        "broker_cpu_s": 0.01,
        "caps_hit": {},
    }


def _results(tasks: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    rows = [{"task": name, "kind": "", "direct": d, "codemode": c} for name, (d, c) in tasks.items()]
    direct = [d for d, _ in tasks.values()]
    code = [c for _, c in tasks.values()]

    def total(modes: list[dict[str, Any]]) -> dict[str, Any]:
        summary = _mode(sum(m["total_tokens"] for m in modes), sum(m["passed"] for m in modes))
        return summary | {"runs": sum(m["runs"] for m in modes)}

    return {
        "date": "today",
        "command": "codemode bench tokens",
        "agents": "scripted",
        "tokenizer": "cl100k_base",
        "backend": "process",
        "servers": {"crm": 5},
        "definition_tokens": {"direct": 100, "codemode": 10},
        "prices_usd_per_million": {"input": 3.0, "output": 15.0},
        "summary": {"direct": total(direct), "codemode": total(code)},
        "tasks": rows,
        "runs": [],
        "catalog": {"source": "", "points": []},
        "anchors": [],
    }


def _saving_of(results: dict[str, Any], task: str) -> str:
    return next(cells[3] for cells in task_rows(results) if cells[0] == task)


def _table_text(results: dict[str, Any]) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(terminal_table(results))
    return console.export_text()


@pytest.mark.parametrize(
    ("direct", "codemode", "expected"),
    [
        (_mode(1000, 1), _mode(0, 0), "n/a (code mode failed)"),  # died at once: not "100.0% less"
        (_mode(1000, 0), _mode(200, 1), "n/a (direct failed)"),
        (_mode(1000, 0), _mode(0, 0), "n/a (direct and code mode failed)"),
        (_mode(3000, 2, runs=3), _mode(300, 3, runs=3), "n/a (direct failed)"),  # one trial of three
        (_mode(1000, 1), _mode(250, 1), "75.0% less"),
        (_mode(1000, 1), _mode(1500, 1), "50.0% MORE"),
    ],
)
def test_a_task_compares_tokens_only_when_both_modes_solved_it(
    direct: dict[str, Any], codemode: dict[str, Any], expected: str
) -> None:
    results = _results({"task": (direct, codemode)})
    assert _saving_of(results, "task") == expected
    assert expected in markdown(results)


def test_the_suite_row_compares_only_the_tasks_both_modes_solved() -> None:
    results = _results(
        {
            "solved": (_mode(1000, 1), _mode(100, 1)),
            "broken": (_mode(5000, 1), _mode(0, 0)),
        }
    )
    text = _table_text(results)
    assert "90.0% less on the 1 of 2 both solved" in text
    assert "100.0% less" not in text
    assert "n/a (code mode failed)" in text


def test_the_suite_row_is_n_a_when_no_task_was_solved_by_both() -> None:
    results = _results({"a": (_mode(1000, 1), _mode(0, 0)), "b": (_mode(800, 0), _mode(90, 1))})
    text = _table_text(results)
    assert "n/a (no task solved by both)" in text
    assert "% less" not in text
    report = markdown(results)
    assert "% less" not in report
    assert "The closest is" not in report, "no comparison is drawn from a failed task"


def test_a_fully_solved_suite_says_plainly_how_much_less() -> None:
    results = _results({"a": (_mode(1000, 1), _mode(100, 1)), "b": (_mode(1000, 1), _mode(300, 1))})
    text = _table_text(results)
    assert "80.0% less" in text
    assert "both solved" not in text


def test_the_bundled_suite_against_a_config_without_its_servers_says_what_it_needs(tmp_path: Path) -> None:
    """Nothing starts: the servers are checked by name in the config before any server runs."""
    config = tmp_path / "codemode.toml"
    config.write_text(
        '[servers.time]\ncommand = "mcp-server-time-that-is-not-installed"\n'
        '[servers.crm]\ncommand = "crm-server-that-is-not-installed"\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(
        cli, ["bench", "tokens", "--config", str(config), "--out", str(tmp_path / "out"), "--sizes", ""]
    )
    assert result.exit_code == 1
    assert "the bundled task suite needs its own example servers (docs, crm, tickets)" in result.output
    assert "no enabled server named docs, tickets" in result.output
    assert "Leave out --config" in result.output and "--tasks DIR" in result.output
    assert not (tmp_path / "out").exists()


def test_the_chart_of_a_run_with_a_failed_mode_is_still_drawn(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from codemode.bench._charts import TASK_CHART, write_charts

    results = _results({"solved": (_mode(1000, 1), _mode(100, 1)), "broken": (_mode(5000, 1), _mode(0, 0))})
    assert write_charts(results, tmp_path) == [TASK_CHART]
    assert (tmp_path / TASK_CHART).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknowns_denials_and_refraining_read_as_such() -> None:
    """An unknown figure is n/a, never 0; denials say which gate refused which tool."""
    direct = _mode(1000, 1) | {
        "sandbox_cpu_s": None,
        "broker_cpu_s": None,
        "channel_in_bytes": None,
        "calls_denied": 2,
        "denied": {"arguments:crm/get_customer": 1, "tool:crm/nope": 1},
        "valid_call_rate": 0.333,
        "schema_pass_rate": 0.5,
        "refrain_scored": 2,
        "refrained": 1,
    }
    code = _mode(100, 1) | {"mcp_calls": 0, "valid_call_rate": None, "schema_pass_rate": None}
    report = markdown(_results({"t": (direct, code)}))
    row = next(line for line in report.splitlines() if line.startswith("| t | direct |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:] == [
        "n/a",  # sandbox CPU
        "30.00",
        "n/a",  # channel: in unknown
        "n/a",  # broker CPU
        "1",
        "33.3%",
        "50.0%",
        "2 (arguments:crm/get_customer x1, tool:crm/nope x1)",
        "1/2",
    ]
    code_row = next(line for line in report.splitlines() if line.startswith("| t | code mode |"))
    assert "| n/a (no call) | n/a (no call) |" in code_row
    assert "| sandbox channel in / out (KB) | 4.0 / 1.0 | 4.0 / 1.0 |" in report
    results = _results({"t": (direct, code)})
    results["summary"] = {"direct": direct, "codemode": code}  # one task: its figures are the totals
    text = _table_text(results)
    assert "valid calls / schema pass" in text and "33.3% / 50.0%" in text


def test_the_cost_chart_shows_cost_per_solved_task_and_the_resource_cost(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from codemode.bench._charts import COST_CHART, write_charts

    results = _results({"a": (_mode(1000, 1), _mode(100, 1))})
    point = {
        "direct_definition_tokens": 10,
        "codemode_definition_tokens": 5,
        "queries": 1,
        "quality": {"recall@1": 1.0, "recall@3": 1.0, "recall@5": 1.0, "mrr": 1.0},
    }
    results["catalog"] = {
        "source": "generated tools",
        "points": [
            point | {"tools": 20, "direct_tokens": 1000, "codemode_tokens": 100},
            point | {"tools": 200, "direct_tokens": 9000, "codemode_tokens": 150},
        ],
        "cost_per_success_usd": [
            {"tools": 20, "direct": 0.003, "codemode": 0.0003},
            {"tools": 200, "direct": 0.027, "codemode": None},  # a mode that solved nothing: no point
        ],
    }
    assert COST_CHART in write_charts(results, tmp_path)
    assert (tmp_path / COST_CHART).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = markdown(results)
    assert "| 200 | 10 | 5 | 9,000 | 150 | 0.027 | n/a | 1 |" in report
