"""The README's main command and the examples run as documented (CI runs them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codemode.ledger import open_ledger

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
    # What next, typed as this person can: the clone's install line and how to add an extra.
    assert "next:" in out and "init --from ~/.config/Claude/claude_desktop_config.json" in out
    assert f"install elsewhere  pip install {REPO}" in out
    assert "-m pip install -e" in out and "[otel]'" in out


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


def _demo_config(directory: Path, backend: str) -> Path:
    """What a user sets up for their servers: init, sync, pin --approve (here: the bundled ones)."""
    config = directory / "codemode.toml"
    subprocess.run([*CLI, "init", "--demo", "--config", str(config)], check=True, capture_output=True)
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("[sandbox]\n", f'[sandbox]\nbackend = "{backend}"\n', 1), encoding="utf-8")
    for command in (["sync"], ["pin", "--approve"]):
        subprocess.run(
            [*CLI, *command, "--config", str(config)], check=True, capture_output=True, timeout=300
        )
    return config


def test_the_agent_loop_runs_on_a_given_config_and_its_sandbox_backend(tmp_path: Path) -> None:
    config = _demo_config(tmp_path, "process")
    completed = subprocess.run(
        [sys.executable, str(REPO / "examples" / "agent_loop.py"), "--config", str(config), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.startswith("Most open tickets:")
    assert f"sandbox backend: process (from {config})" in completed.stderr
    # The runs went through that config's broker: they are in its ledger, beside it.
    ledger = open_ledger(tmp_path / "codemode.db")
    try:
        runs = ledger.list_runs(limit=10)
    finally:
        ledger.close()
    assert len(runs) == 2, "explore, then answer"


def test_the_agent_loop_names_a_missing_config(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(REPO / "examples" / "agent_loop.py"), "--config", str(tmp_path / "nope.toml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert "nope.toml: no such file (make one with 'codemode init')" in completed.stderr


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
