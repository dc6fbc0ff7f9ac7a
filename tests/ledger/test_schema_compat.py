"""A ledger written by an earlier codemode (schema 1, before the store split) still works.

``data/ledger_v1.sql`` is a dump of a file made by that code (``data/make_ledger_v1.py``).
This codemode must open it, verify it, settle what it left in flight, reconcile its unknown
call, replay its results and keep extending its hash chain.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemode.calls import ToolError, ToolResult
from codemode.cli._ledger_cmd import ledger as ledger_group
from codemode.ledger import CallIntent, Fresh, Replay, SqliteLedger, open_ledger

DUMP = Path(__file__).parent / "data" / "ledger_v1.sql"
LATER = datetime(2026, 6, 1, tzinfo=UTC)  # every lease in the dump has long expired by then


def _intent(seq: int, key: str | None, **changes: object) -> CallIntent:
    fields: dict[str, object] = {
        "call_id": f"run-3/{seq}",
        "run_id": "run-3",
        "trace_id": "trace-3",
        "principal": "alice",
        "tenant": "acme",
        "server": "crm",
        "tool": "add_note",
        "schema_hash": "sha256:" + "ab" * 32,
        "arguments": {"customer_id": 42, "text": f"note {seq}", "tags": ["a", "b"]},
        "idempotency_key": key,
    }
    fields.update(changes)
    return CallIntent.model_validate(fields)


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    path = tmp_path / "codemode.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(DUMP.read_text(encoding="utf-8"))
        assert "filter_json" not in _columns(conn, "calls"), "the dump is of a file older than the column"
    return path


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


def _open(path: Path, *, recover: bool = True) -> SqliteLedger:
    return open_ledger(path, create=False, recover=recover, clock=lambda: LATER)


def test_the_old_file_opens_and_verifies_as_it_was(old_file: Path) -> None:
    with _open(old_file, recover=False) as ledger:
        report = ledger.verify()
        assert report.ok, report.problems
        assert report.events == report.head_seq == 39
        states = {c.call_id: c.state for c in ledger.list_calls(run_id="run-1", limit=100)}
        assert states == {
            "run-1/1": "succeeded",
            "run-1/2": "replayed",
            "run-1/3": "denied",
            "run-1/4": "failed",
            "run-1/5": "denied",
            "run-1/6": "unknown",
            "run-1/7": "refused",
            "run-1/8": "abandoned",
            "run-1/9": "reconciled_succeeded",
            "run-1/10": "failed",
            "run-1/11": "succeeded",
            "run-1/12": "succeeded",
            "run-1/14": "sent",
        }
        big = ledger.get_call("run-1/11")
        assert big is not None and big.result_truncated and big.result_bytes and big.result_bytes > 5000
        assert [c.call_id for c in ledger.find_by_receipt("note-7")] == ["run-1/1"]
        assert [r.run_id for r in ledger.list_runs()] == ["run-2", "run-1"]
        approval = ledger.get_approval("ap-1")
        assert approval is not None and approval.used_by_call == "run-1/13"
        assert [e.kind for e in ledger.events("run-1/6")] == ["call_reserved", "call_sent", "call_unknown"]


def test_recovery_reconcile_and_new_calls_extend_the_old_chain(old_file: Path) -> None:
    with _open(old_file) as ledger:  # recovery on open: the other host's lease ran out
        lost = ledger.get_call("run-1/14")
        assert lost is not None and lost.state == "unknown"
        assert {c.call_id for c in ledger.unknown_calls()} == {"run-1/6", "run-1/14"}
        run_2 = ledger.get_run("run-2")
        assert run_2 is not None and run_2.status == "running"  # another host: we cannot tell

        ledger.resolve("run-1/6", "failed", "crm shows no note 6")
        retry = ledger.reserve(
            _intent(6, "k6", arguments={"customer_id": 42, "text": "note 6", "tags": ["a", "b"]})
        )
        assert isinstance(retry, Fresh) and retry.attempt == 2
        ledger.mark_sent(retry.call_id)
        # The file predates filter reports: opening it added the column, and the new call fills it.
        report_in = {"secrets_redacted": 0, "pii_tokenized": 1}
        done = ledger.complete(retry.call_id, ToolResult(structured={"note_id": 6}), filtered=report_in)
        assert done.filter_report == report_in
        old_call = ledger.get_call("run-1/1")
        assert old_call is not None and old_call.filter_report is None

        replay = ledger.reserve(
            _intent(1, "k1", arguments={"customer_id": 42, "text": "note 1", "tags": ["a", "b"]})
        )
        assert isinstance(replay, Replay) and replay.original_call_id == "run-1/1"
        assert replay.outcome == ToolResult(structured={"note_id": 7})
        failed = ledger.reserve(
            _intent(10, "k10", arguments={"customer_id": 42, "text": "note 10", "tags": ["a", "b"]})
        )
        assert isinstance(failed, Replay) and failed.outcome.kind == "failed"

        used = ledger.consume_approval(
            "ap-2",
            call_id="run-3/20",
            tenant="acme",
            principal="alice",
            server="crm",
            tool="add_note",
            args_digest="sha256:" + "cd" * 32,
            risk="low",
        )
        assert used.kind == "consumed"
        report = ledger.verify()
        assert report.ok, report.problems
        assert report.events > 39
    with _open(old_file, recover=False) as again:
        assert again.verify().ok


def test_the_cli_shows_and_reconciles_the_old_file(old_file: Path, tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text(f'[ledger]\npath = "{old_file}"\n', encoding="utf-8")
    runner = CliRunner()
    shown = runner.invoke(ledger_group, ["show", "run-1/4", "--config", str(config), "--json"])
    assert shown.exit_code == 0, shown.output
    call = json.loads(shown.stdout)["call"]
    assert call["state"] == "failed"
    assert ToolError.model_validate(call["result"]).message == "customer is archived"
    settled = runner.invoke(
        ledger_group,
        [
            "reconcile",
            "run-1/6",
            "--succeeded",
            "--evidence",
            "note 6 is in the CRM",
            "--config",
            str(config),
        ],
    )
    assert settled.exit_code == 0, settled.output
    assert "reconciled_succeeded" in settled.output
    verified = runner.invoke(ledger_group, ["verify", "--config", str(config)])
    assert verified.exit_code == 0, verified.output
