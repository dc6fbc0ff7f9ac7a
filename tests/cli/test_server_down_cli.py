"""A server that did not start: ``codemode run`` and ``codemode batch`` say so, with why, before
the program runs, and a program that imports it is told why it is not there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemode.cli._main import cli

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "codemode.cli"]
PYTHON = json.dumps(sys.executable)
BROKEN = f"""
[servers.nocmd]
command = "codemode-test-no-such-command"

[servers.crash]
command = {PYTHON}
args = ["-c", "import sys; print('boom: set TIME_API_KEY first', file=sys.stderr); sys.exit(3)"]

[servers.nomod]
command = {PYTHON}
args = ["-m", "mcp_server_tme"]

[servers.off]
command = {PYTHON}
args = ["-m", "mcp_server_time"]
enabled = false

[servers.unreviewed]
command = {PYTHON}
args = ["-m", "mcp_server_time"]

[policy.principals.crm-only]
tools = ["crm/*"]

[policy.principals.no-nomod]
deny_tools = ["nomod/*"]
"""
WHY = {
    "nocmd": "command 'codemode-test-no-such-command' was not found; is it installed and on PATH?",
    "crash": "on stderr it said: boom: set TIME_API_KEY first",
    "nomod": "on stderr it said: " + sys.executable + ": No module named mcp_server_tme",
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo servers, synced and approved; then three servers that cannot start, one that is
    disabled, and one that starts but whose tools nobody reviewed."""
    config = tmp_path_factory.mktemp("down") / "codemode.toml"
    runner = CliRunner()
    assert runner.invoke(cli, ["init", "--demo", "--config", str(config)]).exit_code == 0
    config.write_text(
        config.read_text().replace("[sandbox]\n", '[sandbox]\nbackend = "process"\npool_size = 0\n')
    )
    for args in (["sync"], ["pin", "--approve"]):
        result = runner.invoke(cli, [*args, "--config", str(config)])
        assert result.exit_code == 0, result.output
    config.write_text(config.read_text() + BROKEN)
    return config


def run_cli(
    *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=180, check=False, cwd=cwd
    )


def test_run_says_which_servers_did_not_start_and_why_before_the_program_runs(workspace: Path) -> None:
    program = "from servers.crm import get_customer\nprint('program output')\n1/0"
    done = run_cli("run", "-", "--no-input", "--config", str(workspace), stdin=program)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    error_at = next(i for i, line in enumerate(lines) if line.startswith("--- error "))
    for server, why in WHY.items():
        [at] = [i for i, line in enumerate(lines) if f'warning: server "{server}" did not start: ' in line]
        assert why in lines[at] and "'codemode servers' shows more" in lines[at], lines[at]
        assert at < error_at, "said before the program's own output"
    assert '"off"' not in done.stderr, "a disabled server is not a failure"


def test_a_program_that_runs_without_the_down_servers_succeeds(workspace: Path) -> None:
    program = "from servers.crm import get_customer\nget_customer(customer_id='CUST-0001')['company']"
    done = run_cli("run", "-", "--json", "--no-input", "--config", str(workspace), stdin=program)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "ok"
    assert 'server "nomod" did not start' in done.stderr, "--json keeps stdout one document, not quiet"


@pytest.mark.parametrize(
    ("program", "server"),
    [
        ("from servers.nomod import get_current_time", "nomod"),
        ("import servers.crash", "crash"),
        ("import servers\nservers.nocmd.anything()", "nocmd"),
    ],
)
def test_importing_a_down_server_says_why_it_is_not_there(workspace: Path, program: str, server: str) -> None:
    done = run_cli("run", "-", "--json", "--no-input", "--config", str(workspace), stdin=program)
    assert done.returncode == 1, done.stderr
    message = json.loads(done.stdout)["error"]["message"]
    assert f'[codemode: server "{server}" is down: ' in message and WHY[server] in message, message


def test_importing_a_disabled_server_says_it_is_disabled(workspace: Path) -> None:
    done = run_cli("run", "-", "--json", "--config", str(workspace), stdin="from servers.off import x")
    message = json.loads(done.stdout)["error"]["message"]
    assert 'server "off" is disabled in the configuration (enabled = false)' in message, message


def test_importing_a_server_with_no_approved_tools_says_to_review_them(workspace: Path) -> None:
    program = "from servers.unreviewed import get_current_time"
    done = run_cli("run", "-", "--json", "--no-input", "--config", str(workspace), stdin=program)
    message = json.loads(done.stdout)["error"]["message"]
    assert 'server "unreviewed" has no approved tools yet (2 wait for review: ' in message, message
    assert "'codemode pin --approve unreviewed'" in message, message


@pytest.mark.parametrize("principal", ["crm-only", "no-nomod"])
def test_a_principal_that_may_not_see_the_server_is_not_told_of_it(workspace: Path, principal: str) -> None:
    done = run_cli(
        "run",
        "-",
        "--json",
        "--principal",
        principal,
        "--config",
        str(workspace),
        stdin="import servers.nomod",
    )
    message = json.loads(done.stdout)["error"]["message"]
    assert "codemode:" not in message and "mcp_server_tme" not in message, message


def test_batch_says_which_servers_did_not_start_before_any_item_runs(workspace: Path, tmp_path: Path) -> None:
    program = tmp_path / "item.py"
    program.write_text("INPUT['n'] * 2\n")
    items = tmp_path / "items.jsonl"
    items.write_text('{"n": 1}\n{"n": 2}\n')
    done = run_cli("batch", str(program), "--inputs", str(items), "--json", "--config", str(workspace))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["done"] == 2
    for server, why in WHY.items():
        [line] = [line for line in done.stderr.splitlines() if f'server "{server}" did not start' in line]
        assert why in line, line
