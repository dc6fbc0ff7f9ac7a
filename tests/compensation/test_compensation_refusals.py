"""On the notes server: a ``[compensation]`` rule that cannot work is refused at run start with
its key, before any write; a write whose own outcome is unknown is never undone blindly; and
``ledger compensate --dry-run``, ``ledger show`` and the run's summary say where a failed run
stands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codemode.catalog import approve, load_lock, observe, save_lock
from codemode.engine import compensate_run
from codemode.errors import ConfigError
from codemode.host import McpHost
from codemode.ledger import CallIntent, Fresh, open_ledger
from tests.compensation._notes import ADD_THREE_THEN_FAIL, deploy_notes, write_toml

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLI = [sys.executable, "-m", "codemode.cli"]


async def test_a_rule_whose_undoing_tool_is_not_approved_is_refused_before_any_write(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    # The pins as a reviewer left them: every tool approved but delete_note, still pending.
    async with McpHost(notes.config) as host:
        lock = load_lock(tmp_path / "missing.lock")
        for catalog in host.catalogs():
            lock, _ = observe(lock, catalog)
    save_lock(notes.config.lock_path, approve(lock, ["notes/add_note", "notes/list_notes"])[0])
    async with notes.engine() as engine:
        with pytest.raises(ConfigError) as refused:
            await engine.run(ADD_THREE_THEN_FAIL, compensate=True)
    key = 'compensation."notes/add_note".tool'
    assert any(
        where == key and "notes/delete_note is not approved" in why for where, why in refused.value.problems
    ), refused.value.problems
    assert notes.held() == {}, "refused at run start: nothing was written"


async def test_a_rule_naming_a_result_field_the_tool_lacks_is_refused_before_any_write(
    tmp_path: Path,
) -> None:
    rule = {"notes/add_note": {"tool": "notes/delete_note", "arguments": {"note_id": "result.id"}}}
    notes = await deploy_notes(tmp_path, compensation=rule)
    async with notes.engine() as engine:
        with pytest.raises(ConfigError) as refused:
            await engine.run(ADD_THREE_THEN_FAIL, compensate=True)
    key = 'compensation."notes/add_note".arguments.note_id'
    assert any(where == key and "has no result field 'id'" in why for where, why in refused.value.problems), (
        refused.value.problems
    )
    assert notes.held() == {}


async def test_a_write_whose_outcome_is_unknown_is_listed_to_reconcile_not_undone(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    async with notes.engine() as engine:
        failed = await engine.run(ADD_THREE_THEN_FAIL)
    assert len(notes.held()) == 3
    done = notes.calls(failed.run_id)
    # A fourth write of the run that was sent and never answered (as after a crash mid-call).
    with open_ledger(notes.config.ledger_path, create=False) as ledger:
        model = done[-1]
        intent: dict[str, Any] = {
            "call_id": f"{failed.run_id}/in-doubt",
            "run_id": failed.run_id,
            "trace_id": model.trace_id,
            "principal": model.principal,
            "tenant": model.tenant,
            "server": "notes",
            "tool": "add_note",
            "schema_hash": model.schema_hash,
            "arguments": {"text": "four"},
            "idempotency_key": "in-doubt-write",
        }
        unknown = ledger.reserve(CallIntent(**intent))
        assert isinstance(unknown, Fresh)
        ledger.mark_sent(unknown.call_id)
    async with notes.engine() as engine:
        report = await compensate_run(engine, failed.run_id)
    assert report.sent == 3 and notes.held() == {}
    assert [e.status for e in report.effects] == ["in doubt", "compensated", "compensated", "compensated"]
    assert "codemode ledger reconcile" in (report.effects[0].detail or "")
    assert report.outcome == "partial", "an effect in doubt remains until it is reconciled"
    assert len(notes.deletes()) == 3, "nothing was sent to undo the write in doubt"


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=180, check=False
    )


async def test_ledger_compensate_dry_run_sends_nothing_and_ledger_show_says_partial(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    config = str(write_toml(notes, tmp_path / "codemode.toml"))
    ran = json.loads(
        _cli("run", "-", "--json", "--no-input", "--config", config, stdin=ADD_THREE_THEN_FAIL).stdout
    )
    run_id = str(ran["run_id"])
    dry = _cli("ledger", "compensate", run_id, "--dry-run", "--json", "--no-input", "--config", config)
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["dry_run"] is True and planned["sent"] == 0
    assert [e["status"] for e in planned["effects"]] == ["would compensate"] * 3
    assert all(e["undo_tool"] == "notes/delete_note" for e in planned["effects"])
    assert len(notes.held()) == 3 and notes.deletes() == []
    shown = _cli("ledger", "show", run_id, "--json", "--config", config)
    assert json.loads(shown.stdout)["outcome"] == "partial"


async def test_ledger_show_says_compensation_failed(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path)
    config = str(write_toml(notes, tmp_path / "codemode.toml"))
    program = "from servers.notes import add_note\nadd_note(text='locked')\nraise RuntimeError('failed')\n"
    ran = _cli("run", "-", "--json", "--no-input", "--compensate", "--config", config, stdin=program)
    run_id = str(json.loads(ran.stdout)["run_id"])
    shown = _cli("ledger", "show", run_id, "--config", config)
    assert "outcome: compensation failed" in shown.stdout, shown.stdout + shown.stderr


async def test_the_run_summary_says_which_effects_remain(tmp_path: Path) -> None:
    notes = await deploy_notes(tmp_path, compensation={})  # nothing declared undoes add_note
    config = str(write_toml(notes, tmp_path / "codemode.toml"))
    ran = _cli("run", "-", "--no-input", "--compensate", "--config", config, stdin=ADD_THREE_THEN_FAIL)
    assert ran.returncode == 1
    remaining = [line for line in ran.stderr.splitlines() if line.startswith("not compensable")]
    assert len(remaining) == 3 and all("notes/add_note" in line for line in remaining), ran.stderr
    assert 'no [compensation."notes/add_note"] is declared' in remaining[0]
    assert "error · partial · run " in ran.stderr
    assert len(notes.held()) == 3
