"""``codemode run --compensate/--verify`` and ``codemode ledger compensate`` as a user runs them:
real processes, the notes server, one killed with SIGKILL in the middle of a compensation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.compensation._notes import ADD_THREE_THEN_FAIL, Notes, deploy_notes, write_toml

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLI = [sys.executable, "-m", "codemode.cli"]


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=180, check=False
    )


def as_json(completed: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert completed.stdout, completed.stderr
    return json.loads(completed.stdout)


async def _deployed(tmp_path: Path, **options: object) -> tuple[Notes, Path]:
    notes = await deploy_notes(tmp_path, **options)  # type: ignore[arg-type]
    return notes, write_toml(notes, tmp_path / "codemode.toml")


async def test_run_compensate_then_ledger_compensate_is_a_no_op(tmp_path: Path) -> None:
    notes, config = await _deployed(tmp_path)
    ran = cli(
        "run", "-", "--json", "--no-input", "--compensate", "--config", str(config), stdin=ADD_THREE_THEN_FAIL
    )
    assert ran.returncode == 1
    result = as_json(ran)
    assert result["outcome"] == "compensated"
    assert notes.held() == {}
    run_id = str(result["run_id"])
    again = cli("ledger", "compensate", run_id, "--json", "--no-input", "--config", str(config))
    assert again.returncode == 0, again.stderr
    assert as_json(again)["sent"] == 0 and as_json(again)["outcome"] == "compensated"
    assert len(notes.deletes()) == 3  # nothing sent twice
    shown = as_json(cli("ledger", "show", run_id, "--json", "--config", str(config)))
    assert shown["outcome"] == "compensated"
    human = cli("ledger", "show", run_id, "--config", str(config))
    assert "outcome: compensated" in human.stdout
    assert cli("ledger", "verify", "--config", str(config)).returncode == 0


async def test_run_verify_marks_a_failing_check_unverified(tmp_path: Path) -> None:
    notes, config = await _deployed(tmp_path)
    check = tmp_path / "check.py"
    check.write_text("from servers.notes import list_notes\nlen(list_notes()['notes']) == RESULT + 1\n")
    program = "from servers.notes import add_note\nadd_note(text='one')\n1\n"
    ran = cli(
        "run", "-", "--json", "--no-input", "--verify", str(check), "--config", str(config), stdin=program
    )
    assert ran.returncode == 1
    result = as_json(ran)
    assert (result["status"], result["outcome"], result["verified"]) == ("ok", "unverified", False)
    assert "returned False, not True" in str(result["verify_error"])
    assert len(notes.held()) == 1  # not compensated unless asked
    shown = as_json(cli("ledger", "show", str(result["run_id"]), "--json", "--config", str(config)))
    assert shown["outcome"] == "unverified"
    # An unverified run is compensable, by hand.
    undone = cli(
        "ledger", "compensate", str(result["run_id"]), "--json", "--no-input", "--config", str(config)
    )
    assert as_json(undone)["outcome"] == "compensated" and notes.held() == {}
    check.write_text("from servers.notes import list_notes\nlen(list_notes()['notes']) == RESULT\n")
    passing = cli(
        "run", "-", "--json", "--no-input", "--verify", str(check), "--config", str(config), stdin=program
    )
    assert passing.returncode == 0, passing.stderr
    assert (as_json(passing)["outcome"], as_json(passing)["verified"]) == ("succeeded", True)


async def test_bad_compensation_config_is_refused_before_the_run_with_the_key_named(tmp_path: Path) -> None:
    rule = {"notes/add_note": {"tool": "notes/erase_note", "arguments": {"note_id": "result.note_id"}}}
    notes, config = await _deployed(tmp_path, compensation=rule)
    ran = cli("run", "-", "--no-input", "--compensate", "--config", str(config), stdin=ADD_THREE_THEN_FAIL)
    assert ran.returncode == 2  # a configuration error
    assert (
        'compensation."notes/add_note".tool: no configured server lists the tool notes/erase_note'
        in ran.stderr
    )
    assert notes.held() == {}  # refused before the program ran


def _kill_in_first_delete(notes: Notes, run_id: str, config: Path) -> None:
    """``ledger compensate RUN`` killed with SIGKILL (its servers with it) while the server is in
    the first delete: that compensation is sent and never answered."""
    killed = subprocess.Popen(
        [*CLI, "ledger", "compensate", run_id, "--no-input", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill takes its servers too
    )
    try:
        deadline = time.monotonic() + 120
        while not notes.deletes() and time.monotonic() < deadline and killed.poll() is None:
            time.sleep(0.05)
        assert len(notes.deletes()) == 1, "the first compensation reached the server"
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)


async def test_sigkill_during_compensation_then_resume_sends_no_compensation_twice(tmp_path: Path) -> None:
    notes, config = await _deployed(tmp_path)
    ran = as_json(cli("run", "-", "--json", "--no-input", "--config", str(config), stdin=ADD_THREE_THEN_FAIL))
    run_id = str(ran["run_id"])
    assert ran["outcome"] is None and len(notes.held()) == 3
    # The same deployment (lock, ledger, notes), its server slow to delete: a window to kill in.
    slow = await deploy_notes(tmp_path, env={"NOTES_SLOW_DELETE": "120"})
    slow_config = write_toml(slow, tmp_path / "slow.toml")
    _kill_in_first_delete(notes, run_id, slow_config)
    first = notes.deletes()[0]
    resumed = as_json(cli("ledger", "compensate", run_id, "--json", "--no-input", "--config", str(config)))
    statuses = [effect["status"] for effect in resumed["effects"]]  # type: ignore[union-attr]
    # The killed one is in doubt (sent, never answered): listed, not sent again; the rest are undone.
    assert statuses == ["compensation in doubt", "compensated", "compensated"]
    assert resumed["sent"] == 2
    assert notes.deletes().count(first) == 1 and len(notes.deletes()) == 3
    assert (
        cli("ledger", "compensate", run_id, "--json", "--no-input", "--config", str(config)).returncode == 1
    )
    assert notes.deletes().count(first) == 1  # a second resume does not send it either
    # Reconciled first (the server still holds the note: the killed delete never happened),
    # then undone by a deliberate new attempt under the same key.
    assert first in notes.held()
    in_doubt = str(resumed["effects"][0]["compensation_call"])  # type: ignore[index]
    settled = cli(
        "ledger",
        "reconcile",
        in_doubt,
        "--failed",
        "--evidence",
        "note still listed",
        "--config",
        str(config),
    )
    assert settled.returncode == 0, settled.stderr
    last = as_json(cli("ledger", "compensate", run_id, "--json", "--no-input", "--config", str(config)))
    assert (last["outcome"], last["sent"]) == ("compensated", 1)
    assert notes.held() == {}
    assert cli("ledger", "verify", "--config", str(config)).returncode == 0


async def test_a_failed_compensation_is_listed_by_reconcile(tmp_path: Path) -> None:
    notes, config = await _deployed(tmp_path)
    program = "from servers.notes import add_note\nadd_note(text='locked')\nraise RuntimeError('failed')\n"
    ran = as_json(
        cli("run", "-", "--json", "--no-input", "--compensate", "--config", str(config), stdin=program)
    )
    assert ran["outcome"] == "compensation failed"
    listed = as_json(cli("ledger", "reconcile", "--json", "--config", str(config)))
    failed = listed["compensation_failed"]
    assert isinstance(failed, list) and len(failed) == 1  # pyright: ignore[reportUnknownArgumentType]
    assert failed[0]["compensates"] == f"{ran['run_id']}/0"
    human = cli("ledger", "reconcile", "--config", str(config))
    assert "compensation failed" in human.stdout and "not retried" in human.stdout
    assert list(notes.held().values()) == ["locked"]
