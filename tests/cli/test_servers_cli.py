"""codemode servers and codemode sync as a person reads them (the table, failures, next steps)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codemode.cli._main import cli

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "servers"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "servers"

# A server that writes to stderr and exits before speaking MCP: its stderr tail is the clue.
CRASHER = "import sys; print('boom: cannot open /etc/crm.conf', file=sys.stderr); sys.exit(3)"


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def write_config(path: Path) -> None:
    path.write_text(
        f"""
[servers.crm]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(EXAMPLES / "crm_server.py"))}]

[servers.broken]
command = {json.dumps(sys.executable)}
args = ["-c", {json.dumps(CRASHER)}]
reconnect = false
connect_timeout = 20

[servers.off]
command = "never-started"
enabled = false
""",
        encoding="utf-8",
    )


def test_servers_shows_a_table_and_why_a_server_failed(tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    write_config(config)
    result = run("servers", "--config", str(config))
    assert result.exit_code == 1, result.output  # one server failed
    out = result.stdout
    assert "crm" in out and "ready" in out and "stdio" in out
    assert "disabled" in out
    assert "✗ broken" in result.stderr
    assert "boom: cannot open /etc/crm.conf" in result.stderr  # the server's own words


def test_sync_lists_what_was_added_and_says_what_to_do_next(tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    write_config(config)
    export = tmp_path / "stubs"
    result = run("sync", "--config", str(config), "--export", str(export))
    assert result.exit_code == 1, result.output  # 'broken' failed; crm was still recorded
    out = result.stdout
    assert "crm: 0 unchanged" in out
    assert "added" in out and "get_customer" in out
    assert "await approval" in out and "codemode pin --approve" in out
    assert f"wrote {tmp_path / 'codemode.lock'}" in out
    assert (export / "codemode_runtime.pyi").exists()
    assert "✗ broken" in result.stderr
    # Nothing is approved yet, so the exported tree has no crm tools.
    assert not (export / "servers" / "crm" / "get_customer.py").exists()
    again = run("sync", "--config", str(config))
    assert "crm: " in again.stdout and "await approval" in again.stdout
    assert "  added" not in again.stdout  # nothing new since the first sync
