"""The README's main command and the examples run as documented (CI runs them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "codemode.cli"]


def test_the_demo_runs_end_to_end_and_reports_token_figures(tmp_path: Path) -> None:
    completed = subprocess.run(
        [*CLI, "demo", "--json", "--backend", "process", "--dir", str(tmp_path / "ws")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    run = report["run"]
    assert run["status"] == "ok"
    assert len(run["result"]) == 5
    assert run["calls"] > 50, "the program pages through 12,480 rows and fans out over customers"
    tokens = report["tokens"]
    direct = tokens["tool_definitions_tokens_direct"] + tokens["tool_result_tokens_direct"]
    codemode = (
        tokens["tool_definitions_tokens_codemode"]
        + tokens["program_tokens"]
        + tokens["final_result_tokens_codemode"]
    )
    assert direct > 50 * codemode, tokens
    assert (tmp_path / "ws" / "codemode.lock").exists()


def test_the_demo_prints_the_result_and_a_labelled_estimate_for_a_person() -> None:
    """What `./dev demo` shows: the five rows, the backend, and the token table marked as an estimate."""
    completed = subprocess.run(
        [*CLI, "demo", "--backend", "process"], capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    out = completed.stdout
    assert "ESTIMATED tokens a model would see" in out
    assert "estimate: codemode would use" in out and "codemode bench tokens" in out
    assert "process" in out  # the backend that ran it is named
    assert "workspace kept" not in out  # no --dir: nothing is left behind


def test_the_scripted_agent_answers_using_only_run_code() -> None:
    completed = subprocess.run(
        [sys.executable, str(REPO / "examples" / "agent_loop.py"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.startswith("Most open tickets:")
    assert completed.stdout.count(" open tickets)") == 3


def test_the_batch_example_writes_one_verified_note_per_transcript(tmp_path: Path) -> None:
    config = tmp_path / "demo" / "codemode.toml"
    for command in (["init", "--demo"], ["sync"], ["pin", "--approve"]):
        subprocess.run(
            [*CLI, *command, "--config", str(config)], check=True, capture_output=True, timeout=300
        )
    with config.open("a", encoding="utf-8") as handle:
        handle.write('\n[policy.consent]\nnever = ["crm/add_note"]\n')
    example = REPO / "examples" / "batch"
    completed = subprocess.run(
        [
            *CLI,
            "batch",
            str(example / "extract_to_crm.py"),
            *("--inputs", str(example / "transcripts.jsonl"), "--key", "doc_id"),
            *("--verify", str(example / "verify_note.py"), "--json", "--config", str(config)),
            *("--out", str(tmp_path / "results.jsonl")),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    summary = json.loads(completed.stdout)
    assert summary["counts"]["done"] == 20
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sum(1 for r in results if r["result"]["customer"]) >= 15, "most transcripts name a customer"
