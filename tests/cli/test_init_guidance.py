"""``codemode init`` ends with the next step that fits what it wrote.

A template without servers connects to nothing, so it says how to get a first server (a
``[servers.X]`` table, or an import of another host's ``mcpServers`` file) instead of "sync".
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from click.testing import CliRunner, Result

from codemode.cli._main import cli


def init(*args: str) -> Result:
    return CliRunner().invoke(cli, ["init", *args], catch_exceptions=False)


def test_a_template_without_servers_says_how_to_add_one(tmp_path: Path) -> None:
    config = tmp_path / "work" / "codemode.toml"
    result = init("--config", str(config))
    assert result.exit_code == 0, result.output
    assert "(0 servers)" in result.stdout
    example = '\n    [servers.time]\n    command = "uvx"\n    args = ["mcp-server-time"]\n'
    assert example in result.stdout
    # The example is the shape codemode.toml takes: pasted into the file, it loads.
    pasted = config.read_text(encoding="utf-8") + example.replace("\n    ", "\n")
    assert tomllib.loads(pasted)["servers"]["time"] == {"command": "uvx", "args": ["mcp-server-time"]}
    assert f"add a [servers.<name>] table to {config}" in result.stdout
    assert f"codemode init --force --from claude_desktop_config.json --config {config}" in result.stdout
    assert "to connect and list tools" not in result.stdout


def test_imported_servers_lead_to_sync_and_pin_for_that_config(tmp_path: Path) -> None:
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps({"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}))
    config = tmp_path / "work" / "codemode.toml"
    result = init("--from", str(source), "--config", str(config))
    assert result.exit_code == 0, result.output
    for step in ("sync", "pin", "pin --approve"):
        assert f"'codemode {step} --config {config}'" in result.stdout


def test_a_file_without_servers_says_what_it_needs(tmp_path: Path) -> None:
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps({"mcpServers": {}}))
    config = tmp_path / "codemode.toml"
    result = init("--from", str(source), "--config", str(config))
    assert result.exit_code == 1
    assert "defines no server codemode can use" in result.stderr
    assert "'mcpServers'" in result.stderr and "without --from" in result.stderr
    assert not config.exists()
