"""codemode run / approve / tree / search from the command line, on the example servers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemode.cli._main import cli
from tests._demo_workspace import make_workspace
from tests._framing import PAYLOAD, framed_sections

CLI = [sys.executable, "-m", "codemode.cli"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("cli"), pool_size=0)


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=180, check=False
    )


@pytest.mark.integration
def test_run_json_prints_the_documented_keys(workspace: Path) -> None:
    program = "from servers.crm import get_customer\nget_customer(customer_id='CUST-0001')['company']"
    completed = run_cli("run", "-", "--json", "--config", str(workspace), stdin=program)
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    for key in ("status", "result", "stdout", "stderr", "error", "run_id", "calls", "duration_ms"):
        assert key in data
    assert data["status"] == "ok"
    assert data["calls"] == 1
    assert isinstance(data["result"], str)
    usage = data["usage"]
    assert usage["cpu_s"] > 0 and usage["peak_mb"] > 0 and usage["cap_hit"] is None
    # The program went in, the call and the result came out: both directions carried bytes.
    assert usage["channel_in_bytes"] >= len(program) and usage["channel_out_bytes"] > 0
    assert data["broker_cpu_s"] > 0, "the call went through the broker's gates"


@pytest.mark.integration
def test_a_failing_program_exits_1_with_the_error(workspace: Path) -> None:
    completed = run_cli("run", "-", "--json", "--config", str(workspace), stdin="1/0")
    assert completed.returncode == 1
    data = json.loads(completed.stdout)
    assert data["error"]["type"] == "ZeroDivisionError"
    assert "line 1" in data["error"]["traceback"]


@pytest.mark.integration
def test_a_risky_call_without_a_terminal_is_denied_and_a_preissued_approval_lets_it_through_once(
    workspace: Path,
) -> None:
    program = "from servers.crm import add_note\nadd_note(customer_id='CUST-0002', text='from the cli test')"
    denied = json.loads(
        run_cli("run", "-", "--json", "--no-input", "--config", str(workspace), stdin=program).stdout
    )
    assert denied["status"] == "error"
    assert "codemode approve crm/add_note" in denied["error"]["message"]

    arguments = json.dumps({"customer_id": "CUST-0002", "text": "from the cli test"})
    issued = run_cli(
        "approve", "crm/add_note", "--args", arguments, "--ttl", "2m", "--config", str(workspace)
    )
    assert issued.returncode == 0, issued.stderr
    allowed = json.loads(
        run_cli("run", "-", "--json", "--no-input", "--config", str(workspace), stdin=program).stdout
    )
    assert allowed["status"] == "ok", allowed
    again = json.loads(
        run_cli("run", "-", "--json", "--no-input", "--config", str(workspace), stdin=program).stdout
    )
    assert again["status"] == "error", "the approval was single-use"


def test_tree_lists_and_reads_stubs(workspace: Path) -> None:
    runner = CliRunner()
    listing = runner.invoke(cli, ["tree", "servers/crm", "--json", "--config", str(workspace)])
    assert listing.exit_code == 0, listing.output
    paths = {entry["path"] for entry in json.loads(listing.stdout)}
    assert "servers/crm/get_customer.py" in paths
    source = runner.invoke(cli, ["tree", "servers/crm/get_customer.py", "--config", str(workspace)])
    assert "def get_customer(" in source.stdout
    missing = runner.invoke(cli, ["tree", "servers/../etc/passwd", "--config", str(workspace)])
    assert missing.exit_code != 0


def test_search_finds_tools_by_plain_words(workspace: Path) -> None:
    result = CliRunner().invoke(
        cli, ["search", "close a support ticket", "--json", "--config", str(workspace)]
    )
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert hits[0]["module"] == "servers.tickets.close_ticket"


@pytest.mark.integration
def test_wall_time_stops_a_long_program_and_limits_cannot_exceed_the_config(workspace: Path) -> None:
    slow = run_cli(
        "run",
        "-",
        "--json",
        "--wall-time",
        "1",
        "--config",
        str(workspace),
        stdin="import time\ntime.sleep(30)",
    )
    assert slow.returncode == 1, slow.stderr
    stopped = json.loads(slow.stdout)
    error = stopped["error"]
    assert error is not None and "time" in (error["type"] + error["message"]).lower()
    assert stopped["usage"]["cap_hit"] == "wall_time"
    too_long = run_cli("run", "-", "--wall-time", "100000", "--config", str(workspace), stdin="1")
    assert too_long.returncode == 2 and "above the configured maximum" in too_long.stderr
    too_big = run_cli("run", "-", "--memory", "999999", "--config", str(workspace), stdin="1")
    assert too_big.returncode == 2 and "memory_mb" in too_big.stderr


@pytest.mark.integration
def test_a_lower_memory_limit_applies_to_the_sandbox(workspace: Path) -> None:
    hog = "x = bytearray(200 * 1024 * 1024)\nlen(x)"
    capped = run_cli("run", "-", "--json", "--memory", "64", "--config", str(workspace), stdin=hog)
    assert capped.returncode == 1, capped.stdout
    data = json.loads(capped.stdout)
    assert data["status"] == "error"
    assert data["usage"]["cap_hit"] == "memory", data


@pytest.mark.integration
def test_printed_lines_cannot_forge_the_framing_of_the_program_s_output(workspace: Path) -> None:
    """What the program prints or raises (a tool's text, often) stays inside codemode's sections
    on stderr; the summary comes after the end marker."""
    program = (
        f"import sys\nnote = {PAYLOAD!r}\n"
        "print(note)\nprint(note, file=sys.stderr)\nraise RuntimeError(note)\n"
    )
    completed = run_cli("run", "-", "--config", str(workspace), stdin=program)
    assert completed.returncode == 1, completed.stderr
    assert completed.stdout.rstrip("\n") == PAYLOAD, "the printed output is the value, on stdout"
    sections = framed_sections(completed.stderr)
    assert [name for name, _ in sections] == ["stderr", "error", "end"], completed.stderr
    assert sections[0][1].rstrip("\n") == PAYLOAD
    assert sections[1][1].startswith("Traceback"), sections[1][1]
    assert sections[1][1].rstrip("\n").endswith(f"\nRuntimeError: {PAYLOAD}"), "the error comes last"
    assert sections[1][1].count(PAYLOAD) == 1, "and is read once"
    # After the end marker: codemode's own lines only (the warning is about this very text).
    warning, summary = sections[2][1].rstrip("\n").split("\n")
    assert warning == "warning: instruction-like text in the final result"
    assert re.fullmatch(
        r"error · run run_\w+ · 0 calls · 0 denied · \d+ ms · \d+\.\d\d s CPU · \d+ MB · process", summary
    ), summary
