"""``codemode pin --accept-hints``, the review's hint column, the question ``pin --approve`` asks at
a terminal, and ``codemode approve --args-file``. The pins are written directly (``pin`` works on
the lock file only), so no server is started except where a terminal is."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from click.testing import CliRunner, Result

from codemode.catalog import LockFile, ServerCatalog, ToolSpec, load_lock, observe, save_lock, tool_from_mcp
from codemode.cli._main import cli
from tests.broker.test_terminal_approver import Pty

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}


def spec(server: str, name: str, annotations: dict[str, Any] | None = None) -> ToolSpec:
    data: dict[str, Any] = {"name": name, "description": f"{name}.", "inputSchema": {"type": "object"}}
    if annotations is not None:
        data["annotations"] = annotations
    made = tool_from_mcp(server, mcp_types.Tool.model_validate(data))
    assert isinstance(made, ToolSpec)
    return made


TOOLS = {
    "time": [spec("time", "get_current_time", READ_ONLY), spec("time", "convert_time", READ_ONLY)],
    "memory": [
        spec("memory", "read_graph"),  # no hints: nothing to accept
        spec("memory", "delete_entities", {"destructiveHint": True}),
        spec("memory", "create_entities", {"destructiveHint": False}),
    ],
}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A config naming two untrusted servers (never started), their tools synced, none approved."""
    path = tmp_path / "codemode.toml"
    path.write_text(
        '[servers.time]\ncommand = "mcp-server-time"\n\n[servers.memory]\ncommand = "server-memory"\n',
        encoding="utf-8",
    )
    lock = LockFile()
    for server, tools in TOOLS.items():
        lock, _ = observe(lock, ServerCatalog(server=server, tools=tuple(tools)))
    save_lock(tmp_path / "codemode.lock", lock)
    return path


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain console wide enough that no line a test looks for is wrapped (the CLI's console is
    made once per process, as wide as whatever an earlier test left)."""
    from rich.console import Console

    from codemode.cli import _common, _pin_cmd, _pin_hints

    console = Console(width=300, soft_wrap=True, force_terminal=False, color_system=None)
    for module in (_common, _pin_cmd, _pin_hints):
        monkeypatch.setattr(module, "stdout", console)


def pin(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["pin", "--config", str(config), *args], catch_exceptions=False)


def accepted(config: Path) -> dict[str, str | None]:
    lock = load_lock(config.parent / "codemode.lock")
    return {
        f"{server}/{name}": entry.approved.accepted_risk
        for server, tools in lock.servers.items()
        for name, entry in tools.items()
        if entry.approved is not None
    }


def rows(config: Path) -> dict[str, dict[str, Any]]:
    listed = json.loads(pin(config, "--json").stdout)["pins"]
    return {f"{row['server']}/{row['tool']}": row for row in listed}


def test_the_review_shows_each_tools_claim_next_to_its_risk_now(config: Path) -> None:
    row = rows(config)["time/get_current_time"]
    assert (row["risk"], row["hints_risk"], row["hints_accepted"]) == ("high", "low", False)
    assert rows(config)["memory/create_entities"]["hints_risk"] == "medium"
    assert rows(config)["memory/delete_entities"]["hints_risk"] == "high"
    shown = pin(config).output
    assert "read-only, not destructive, idempotent → low" in shown
    assert "codemode pin --approve --accept-hints SERVER[/TOOL]" in shown


def test_approve_with_accept_hints_stores_the_claim_per_selector(config: Path) -> None:
    result = pin(config, "--approve", "--accept-hints", "time/*", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert sorted(data["approved"]) == ["time/convert_time", "time/get_current_time"]
    assert data["hints_accepted"] == [
        {"tool": "time/convert_time", "risk": "low"},
        {"tool": "time/get_current_time", "risk": "low"},
    ]
    assert accepted(config) == {"time/convert_time": "low", "time/get_current_time": "low"}
    row = rows(config)["time/get_current_time"]
    assert (row["risk"], row["hints_accepted"]) == ("low", True)
    assert "accepted (low)" in pin(config, "--all").output


def test_accept_hints_alone_works_on_tools_approved_already_and_never_lowers_below_the_claim(
    config: Path,
) -> None:
    assert pin(config, "--approve").exit_code == 0
    assert set(accepted(config).values()) == {None}
    result = pin(config, "--accept-hints", "memory")
    assert result.exit_code == 0, result.output
    assert accepted(config) == {
        "time/convert_time": None,
        "time/get_current_time": None,
        "memory/read_graph": None,
        "memory/delete_entities": None,
        "memory/create_entities": "medium",
    }
    assert "accepted the hints of memory/create_entities: medium risk" in result.output
    assert "memory/delete_entities: its hints give nothing lower than high risk" in result.output
    assert rows(config)["memory/delete_entities"]["risk"] == "high"


def test_accept_hints_on_a_tool_not_approved_yet_says_to_approve_it_too(config: Path) -> None:
    result = pin(config, "--accept-hints", "time/get_current_time")
    assert result.exit_code == 2
    assert "codemode pin --approve --accept-hints time/get_current_time" in result.output
    assert set(accepted(config).values()) <= {None}


def test_a_plain_approve_without_a_terminal_says_which_claims_wait_for_review(config: Path) -> None:
    result = pin(config, "--approve")
    assert result.exit_code == 0, result.output
    assert "3 approved tool(s) claim hints that would lower their risk" in result.output
    assert (
        "time/get_current_time (low)" in result.output and "memory/create_entities (medium)" in result.output
    )
    assert "codemode pin --accept-hints SERVER[/TOOL]" in result.output
    assert set(accepted(config).values()) == {None}, "nothing is accepted without being asked"


def test_a_hand_edited_acceptance_stops_pin_with_a_clear_error(config: Path) -> None:
    assert pin(config, "--approve", "--accept-hints", "time").exit_code == 0
    lock_path = config.parent / "codemode.lock"
    data = json.loads(lock_path.read_text())
    data["servers"]["time"]["get_current_time"]["approved"]["accepted_risk"] = "none"
    lock_path.write_text(json.dumps(data))
    result = pin(config)
    assert result.exit_code == 2
    assert "time.get_current_time.approved.accepted_risk" in result.output
    assert "Traceback" not in result.output


# -- the question at a terminal ------------------------------------------------------------------


@contextlib.contextmanager
def pin_at_a_terminal(config: Path, *args: str) -> Generator[tuple[Pty, subprocess.Popen[bytes]]]:
    pair = Pty()
    process = subprocess.Popen(
        [sys.executable, "-m", "codemode.cli", "pin", "--config", str(config), *args],
        stdin=pair.slave,
        stdout=pair.slave,
        stderr=pair.slave,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        yield pair, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)
        pair.close()


def drain(pair: Pty) -> str:
    """Everything the process wrote, once it has exited (the bytes wait in the terminal's buffer)."""
    while select.select([pair.master], [], [], 0)[0]:
        try:
            chunk = os.read(pair.master, 4096)
        except OSError:
            break
        if not chunk:
            break
        pair.seen += chunk
    return pair.seen.decode(errors="replace")


@pytest.mark.integration
def test_approve_at_a_terminal_asks_server_by_server_and_yes_accepts(config: Path) -> None:
    with pin_at_a_terminal(config, "--approve") as (pair, process):
        pair.read_until(b"Accept these hints?")
        first = pair.seen.decode()
        assert "memory: 1 tool(s) claim hints" in first and "memory/create_entities" in first
        assert "→ medium (now high)" in first
        os.write(pair.master, b"n\n")
        pair.read_until(b"time: 2 tool(s) claim hints")
        pair.read_until(b"Accept these hints?", timeout=60)
        os.write(pair.master, b"y\n")
        assert process.wait(timeout=120) == 0, drain(pair)
        assert "the hints of time/get_current_time: low risk" in drain(pair)
    assert accepted(config) == {
        "time/get_current_time": "low",
        "time/convert_time": "low",
        "memory/read_graph": None,
        "memory/delete_entities": None,
        "memory/create_entities": None,
    }


@pytest.mark.integration
def test_each_asks_tool_by_tool_and_no_input_asks_nothing(config: Path) -> None:
    with pin_at_a_terminal(config, "--approve", "time") as (pair, process):
        pair.read_until(b"Accept these hints?")
        os.write(pair.master, b"e\n")
        pair.read_until(b"accept the hints of time/convert_time (low risk)? [y/N]")
        os.write(pair.master, b"y\n")
        pair.read_until(b"accept the hints of time/get_current_time (low risk)? [y/N]")
        os.write(pair.master, b"n\n")
        assert process.wait(timeout=120) == 0, drain(pair)
    assert accepted(config) == {"time/convert_time": "low", "time/get_current_time": None}

    with pin_at_a_terminal(config, "--approve", "memory", "--no-input") as (pair, process):
        assert process.wait(timeout=120) == 0
        screen = drain(pair)
        assert "Accept these hints?" not in screen
        assert "1 approved tool(s) claim hints that would lower their risk" in screen


# -- codemode approve --args-file --------------------------------------------------------------


def approve(config: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(
        cli, ["approve", "--config", str(config), "time/get_current_time", *args], input=stdin
    )


def test_approve_takes_the_arguments_from_a_file_or_stdin_and_binds_the_same_digest(
    config: Path, tmp_path: Path
) -> None:
    assert pin(config, "--approve").exit_code == 0
    arguments = {"timezone": "Europe/Lisbon", "note": 'it\'s "quoted"'}
    (tmp_path / "args.json").write_text(json.dumps(arguments, indent=2))
    results = [
        approve(config, "--args", json.dumps(arguments), "--json"),
        approve(config, "--args-file", str(tmp_path / "args.json"), "--json"),
        approve(config, "--args-file", "-", "--json", stdin=json.dumps(arguments)),
    ]
    for result in results:
        assert result.exit_code == 0, result.output
    digests = {json.loads(result.stdout)["args_digest"] for result in results}
    assert len(digests) == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((), "--args JSON or --args-file FILE"),
        (("--args", "{}", "--args-file", "x.json"), "one of the two"),
        (("--args-file", "missing.json"), "cannot read --args-file missing.json"),
    ],
)
def test_approve_needs_exactly_one_source_of_arguments(
    config: Path, args: tuple[str, ...], words: str
) -> None:
    assert pin(config, "--approve").exit_code == 0
    result = approve(config, *args)
    assert result.exit_code == 2 and words in result.output, result.output


def test_approve_says_which_file_holds_bad_json(config: Path, tmp_path: Path) -> None:
    assert pin(config, "--approve").exit_code == 0
    (tmp_path / "bad.json").write_text('{"timezone": ')
    result = approve(config, "--args-file", str(tmp_path / "bad.json"))
    assert result.exit_code == 1 and "bad.json is not valid JSON" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["--accept-hints", "--diff", "time/get_current_time"],
        ["--accept-hints", "--revoke", "time/get_current_time"],
        ["--approve", "--revoke", "time/get_current_time"],
        ["--diff", "time/get_current_time", "--revoke", "time/convert_time"],
    ],
)
def test_actions_that_do_different_things_are_refused_together_and_nothing_changes(
    config: Path, args: list[str]
) -> None:
    lock = config.with_name("codemode.lock")
    before = lock.read_bytes()
    result = CliRunner().invoke(cli, ["pin", *args, "--config", str(config)])
    assert result.exit_code == 2, result.output
    assert "give one at a time" in result.output
    assert lock.read_bytes() == before
