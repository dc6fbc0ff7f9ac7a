"""codemode ledger list|show|verify|reconcile, through click's CliRunner."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from codemode.calls import ToolResult
from codemode.cli._ledger_cmd import ledger as ledger_group
from codemode.ledger import CallIntent, Fresh, open_ledger

Intent = Callable[..., CallIntent]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "codemode.toml"
    path.write_text("", encoding="utf-8")
    return path


@pytest.fixture
def filled(config: Path, intent: Intent, binding: Any) -> Path:
    """A ledger beside the config: one run with a success, an unknown call and a denial."""
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(binding, "sha256:code")
        ok = store.reserve(intent(0, key="a"))
        lost = store.reserve(intent(1, key="b"))
        assert isinstance(ok, Fresh)
        assert isinstance(lost, Fresh)
        store.mark_sent(ok.call_id)
        store.complete(ok.call_id, ToolResult(structured={"note_id": 7}), receipt="note-7")
        store.mark_sent(lost.call_id)
        store.mark_unknown(lost.call_id, "timed out after 30 s [/] [bold]not markup")
        store.mark_denied(intent(2, key=None), gate="consent", reason="needs approval")
        store.finish_run(binding.run_id, "ok", {"calls": 3})
    return config


def run(*args: str) -> Result:
    return CliRunner().invoke(ledger_group, list(args), catch_exceptions=False)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_list_json_shows_every_call_with_its_state(filled: Path) -> None:
    data = as_json(run("list", "--config", str(filled), "--json"))
    states = {c["call_id"]: c["state"] for c in data["calls"]}
    assert states == {"run-1/0": "succeeded", "run-1/1": "unknown", "run-1/2": "denied"}


def test_list_filters_by_state_and_run(filled: Path) -> None:
    data = as_json(run("list", "--config", str(filled), "--state", "unknown", "--json"))
    assert [c["call_id"] for c in data["calls"]] == ["run-1/1"]
    data = as_json(run("list", "--config", str(filled), "--run", "run-2", "--json"))
    assert data["calls"] == []


def test_list_prints_a_table_even_with_markup_in_reasons(filled: Path) -> None:
    result = run("list", "--config", str(filled))
    assert result.exit_code == 0, result.output
    assert "run-1/1" in result.stdout
    assert "unknown" in result.stdout


def test_list_runs(filled: Path) -> None:
    data = as_json(run("list", "--config", str(filled), "--runs", "--json"))
    assert [(r["run_id"], r["status"]) for r in data["runs"]] == [("run-1", "ok")]


def test_show_a_call_gives_the_execution_record_and_its_history(filled: Path) -> None:
    data = as_json(run("show", "run-1/0", "--config", str(filled), "--json"))
    assert data["call"]["receipt"] == "note-7"
    assert data["call"]["result"] == {
        "kind": "ok",
        "structured": {"note_id": 7},
        "content": [],
        "truncated": False,
    }
    assert [e["kind"] for e in data["events"]] == ["call_reserved", "call_sent", "call_completed"]
    text = run("show", "run-1/1", "--config", str(filled))
    assert text.exit_code == 0
    assert "not markup" in text.stdout


def test_show_a_run_lists_its_calls_in_order(filled: Path) -> None:
    data = as_json(run("show", "run-1", "--config", str(filled), "--json"))
    assert data["run"]["summary"] == {"calls": 3}
    assert [c["call_id"] for c in data["calls"]] == ["run-1/0", "run-1/1", "run-1/2"]
    assert run("show", "run-1", "--config", str(filled)).exit_code == 0


def test_show_something_unknown_fails(filled: Path) -> None:
    result = run("show", "nope", "--config", str(filled))
    assert result.exit_code == 1
    assert "no call or run" in result.stderr


def test_verify_passes_on_a_good_ledger_and_prints_the_head(filled: Path) -> None:
    result = run("verify", "--config", str(filled))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok:")
    data = as_json(run("verify", "--config", str(filled), "--json"))
    assert data["ok"] is True
    assert data["problems"] == []
    anchored = run("verify", "--config", str(filled), "--anchor", f"{data['head_seq']}:{data['head_hash']}")
    assert anchored.exit_code == 0


def test_verify_fails_with_what_and_where_on_a_tampered_ledger(filled: Path) -> None:
    conn = sqlite3.connect(filled.parent / "codemode.db")
    conn.execute("UPDATE calls SET receipt = 'note-8' WHERE call_id = 'run-1/0'")
    conn.commit()
    conn.close()
    result = run("verify", "--config", str(filled), "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False
    assert [(p["kind"], p["where"]) for p in data["problems"]] == [
        ("row_edited", "calls/run-1/0 column receipt")
    ]
    text = run("verify", "--config", str(filled))
    assert text.exit_code == 1
    assert "FAILED" in text.stdout
    assert "calls/run-1/0 column receipt" in text.stdout


def test_verify_rejects_a_malformed_anchor(filled: Path) -> None:
    assert run("verify", "--config", str(filled), "--anchor", "abc").exit_code == 2


def test_reconcile_lists_unknown_calls_with_advice(filled: Path) -> None:
    data = as_json(run("reconcile", "--config", str(filled), "--json"))
    assert [c["call_id"] for c in data["unknown"]] == ["run-1/1"]
    assert "codemode ledger reconcile run-1/1" in data["unknown"][0]["advice"]
    text = run("reconcile", "--config", str(filled))
    assert text.exit_code == 0
    assert "run-1/1" in text.stdout


def test_reconcile_settles_a_call_from_evidence(filled: Path) -> None:
    result = run(
        "reconcile", "run-1/1", "--failed", "--evidence", "no note in CRM", "--config", str(filled), "--json"
    )
    call = as_json(result)["call"]
    assert (call["state"], call["evidence"], call["resolved_by"]) == (
        "reconciled_failed",
        "no note in CRM",
        "cli",
    )
    assert as_json(run("reconcile", "--config", str(filled), "--json"))["unknown"] == []
    assert run("verify", "--config", str(filled)).exit_code == 0


def test_reconcile_with_a_receipt(filled: Path) -> None:
    result = run(
        "reconcile", "run-1/1", "--succeeded", "--evidence", "note 8 exists", "--receipt", "note-8",
        "--config", str(filled),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "reconciled_succeeded" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["reconcile", "run-1/1", "--evidence", "x"],  # no resolution
        ["reconcile", "run-1/1", "--failed"],  # no evidence
        ["reconcile", "--failed", "--evidence", "x"],  # no call id
        ["reconcile", "run-1/0", "--failed", "--evidence", "x"],  # not unknown
    ],
)
def test_reconcile_refuses_incomplete_or_wrong_requests(filled: Path, args: list[str]) -> None:
    result = run(*args, "--config", str(filled))
    assert result.exit_code == 2, result.output


def test_a_missing_ledger_is_an_error_not_a_new_file(config: Path) -> None:
    result = run("list", "--config", str(config))
    assert result.exit_code == 2
    assert "no ledger" in result.stderr
    assert not (config.parent / "codemode.db").exists()


def test_help_texts_explain_each_command() -> None:
    assert "hash chain" in run("--help").stdout
    for command in ("list", "show", "verify", "reconcile"):
        assert run(command, "--help").exit_code == 0


def test_verify_does_not_change_the_file(config: Path, intent: Intent, dead_owner: str) -> None:
    with open_ledger(config.parent / "codemode.db", owner=dead_owner) as crashed:
        answer = crashed.reserve(intent(0))
        assert isinstance(answer, Fresh)
        crashed.mark_sent(answer.call_id)
    assert run("verify", "--config", str(config)).exit_code == 0
    with open_ledger(config.parent / "codemode.db", recover=False) as store:
        assert store.get_call(answer.call_id).state == "sent"  # type: ignore[union-attr]
    # Any other command settles what the dead broker left behind.
    data = as_json(run("reconcile", "--config", str(config), "--json"))
    assert [c["call_id"] for c in data["unknown"]] == [answer.call_id]


def test_list_never_cuts_ids_in_a_narrow_pipe(
    config: Path, intent: Intent, monkeypatch: pytest.MonkeyPatch
) -> None:
    from codemode.calls import RunBinding

    monkeypatch.setenv("COLUMNS", "80")  # what a pipe gets

    run_id = "run_0123456789abcdef"
    bound = RunBinding(run_id=run_id, principal="a-rather-long-principal", tenant="tenant-x", trace_id="t")
    with open_ledger(config.parent / "codemode.db") as store:
        store.begin_run(bound, "sha256:code")
        for seq in range(3):
            call = intent(
                seq, key=None, run_id=run_id, call_id=f"{run_id}/{seq}", server="a-long-server-name"
            )
            store.mark_denied(call, gate="consent", reason="needs approval " + "x" * 200)
    ids = {f"{run_id}/{seq}" for seq in range(3)}
    narrow = run("list", "--config", str(config))
    assert narrow.exit_code == 0, narrow.output
    assert all(len(line) <= 80 for line in narrow.stdout.splitlines()), "it fits an 80-column pipe"
    assert ids <= set(narrow.stdout.split()), "every call id is printed whole"
    runs = run("list", "--config", str(config), "--runs")
    assert run_id in runs.stdout.split()
    wide = run("list", "--config", str(config), "--wide")
    assert "x" * 200 in wide.stdout, "--wide shortens nothing"
