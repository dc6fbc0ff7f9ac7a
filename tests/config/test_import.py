"""Importing the mcpServers JSON of other MCP hosts."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from codemode.config import config_from_mapping, import_mcp_servers, starter_config
from codemode.config._starter import ServerEntry
from codemode.errors import ConfigError
from codemode.net import needs_loopback


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def roundtrip(servers: Mapping[str, ServerEntry]) -> dict[str, object]:
    """The imported servers, written as TOML by the starter and read back."""
    text = starter_config(servers)
    data = tomllib.loads(text)
    config_from_mapping(data)  # the written file must validate
    return data["servers"]


def test_claude_desktop_config_imports_with_secrets_turned_into_references(tmp_path: Path) -> None:
    source = write_json(
        tmp_path / "claude_desktop_config.json",
        {
            "mcpServers": {
                "github": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-github"],
                    "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_literal_secret", "LOG_LEVEL": "debug"},
                },
                "time": {"command": "uvx", "args": ["mcp-server-time"]},
            }
        },
    )
    result = import_mcp_servers(source, needs_loopback=needs_loopback)
    servers = roundtrip(result.servers)
    github = servers["github"]
    assert isinstance(github, dict)
    assert github["env"] == {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_PERSONAL_ACCESS_TOKEN}",
        "LOG_LEVEL": "debug",
    }
    assert "ghp_literal_secret" not in starter_config(result.servers), "a literal secret is never copied"
    assert result.secrets_to_set == ["GITHUB_PERSONAL_ACCESS_TOKEN"]
    assert servers["time"] == {"command": "uvx", "args": ["mcp-server-time"]}


def test_vscode_mcp_json_maps_variables_and_transports(tmp_path: Path) -> None:
    source = write_json(
        tmp_path / "proj" / ".vscode" / "mcp.json",
        {
            "inputs": [{"id": "api-key", "type": "promptString", "password": True}],
            "servers": {
                "fs": {"type": "stdio", "command": "fs-server", "args": ["${workspaceFolder}/data"]},
                "remote": {
                    "type": "http",
                    "url": "http://127.0.0.1:9000/mcp",
                    "headers": {"Authorization": "Bearer ${input:api-key}"},
                },
                "tokened": {"type": "stdio", "command": "x", "env": {"KEY": "${env:MY_KEY}"}},
                "legacy": {"type": "sse", "url": "http://127.0.0.1:9001/sse"},
            },
        },
    )
    result = import_mcp_servers(source, needs_loopback=needs_loopback)
    servers = roundtrip(result.servers)
    assert servers["fs"] == {"command": "fs-server", "args": [f"{(tmp_path / 'proj').resolve()}/data"]}
    assert servers["remote"] == {
        "url": "http://127.0.0.1:9000/mcp",
        "allow_loopback": True,
        "headers": {"Authorization": "Bearer ${API_KEY}"},
    }
    assert any("remote: allow_loopback = true" in w for w in result.warnings)
    assert servers["tokened"] == {"command": "x", "env": {"KEY": "${MY_KEY}"}}
    assert "legacy" not in servers
    assert any("SSE" in w for w in result.warnings)


def test_literal_bearer_header_becomes_a_reference(tmp_path: Path) -> None:
    source = write_json(
        tmp_path / ".mcp.json",
        {
            "mcpServers": {
                "api": {
                    "type": "http",
                    "url": "https://h.invalid/mcp",
                    "headers": {"Authorization": "Bearer sk-1"},
                }
            }
        },
    )
    result = import_mcp_servers(source, needs_loopback=needs_loopback)
    assert result.servers["api"]["headers"] == {"Authorization": "Bearer ${API_AUTHORIZATION}"}


def test_a_literal_dollar_sign_survives_import(tmp_path: Path) -> None:
    source = write_json(
        tmp_path / "a.json", {"mcpServers": {"a": {"command": "echo", "args": ["$HOME", "5$"]}}}
    )
    servers = roundtrip(import_mcp_servers(source, needs_loopback=needs_loopback).servers)
    assert servers["a"] == {"command": "echo", "args": ["$$HOME", "5$$"]}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"other": {}}', "no 'mcpServers'"),
        ('{"mcpServers": {"a": {"args": []}}}', "needs a 'command'"),
        ('{"mcpServers": {"a": {"type": "carrier-pigeon", "command": "x"}}}', "unknown transport"),
    ],
)
def test_bad_import_files_give_clear_errors(tmp_path: Path, content: str, expected: str) -> None:
    source = tmp_path / "bad.json"
    source.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        import_mcp_servers(source, needs_loopback=needs_loopback)
    assert expected in str(info.value)
    assert str(source) in str(info.value)


def test_the_commented_starter_file_is_valid_configuration() -> None:
    text = starter_config()
    config_from_mapping(tomllib.loads(text))
    assert "${" in text and "codemode sync" in text


def test_unknown_keys_are_reported_per_server_and_strict_fails_on_them(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from codemode.cli._main import cli

    source = write_json(
        tmp_path / "claude.json",
        {"mcpServers": {"files": {"command": "npx", "arg": ["-y", "x"]}, "ok": {"command": "uvx"}}},
    )
    imported = import_mcp_servers(source, needs_loopback=needs_loopback)
    assert imported.unknown_keys == {"files": ["arg"]}
    problem = "mcpServers.files.arg: unknown key (did you mean 'args'?)"
    assert imported.warnings == [f"{problem}; not imported"]
    runner = CliRunner()
    written = tmp_path / "a" / "codemode.toml"
    loose = runner.invoke(cli, ["init", "--from", str(source), "--config", str(written)])
    assert loose.exit_code == 0 and problem in loose.output
    # Left out, but not lost: the written file names the key beside its server, and still loads.
    text = written.read_text(encoding="utf-8")
    assert "# not imported: 'arg': unknown key (did you mean 'args'?)\n[servers.files]" in text
    config_from_mapping(tomllib.loads(text))
    strict = runner.invoke(
        cli, ["init", "--from", str(source), "--strict", "--config", str(tmp_path / "b" / "codemode.toml")]
    )
    assert strict.exit_code == 2 and f"  - {problem}" in strict.output
    assert not (tmp_path / "b" / "codemode.toml").exists(), "nothing is written when --strict fails"


def _toml_problem(table: dict[str, object]) -> str:
    """What codemode.toml says about ``[servers.time]`` holding ``table``: its first unknown key."""
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"servers": {"time": table}})
    return next(message for _, message in info.value.problems if "unknown key" in message)


@pytest.mark.parametrize(
    ("entry", "key", "suggestion"),
    [
        ({"command": "uvx", "argss": ["mcp-server-time"]}, "argss", "args"),
        ({"command": "uvx", "enviroment": {"TZ": "UTC"}}, "enviroment", "env"),
        ({"command": "uvx", "environment": {"TZ": "UTC"}}, "environment", "env"),
        ({"command": "uvx", "arguments": ["x"]}, "arguments", "args"),
        ({"command": "uvx", "CWD": "/tmp"}, "CWD", "cwd"),
        ({"url": "https://mcp.example/mcp", "header": {"A": "b"}}, "header", "headers"),
    ],
)
def test_a_misspelled_key_gets_the_same_did_you_mean_as_in_codemode_toml(
    tmp_path: Path, entry: dict[str, object], key: str, suggestion: str
) -> None:
    source = write_json(tmp_path / "claude.json", {"mcpServers": {"time": entry}})
    imported = import_mcp_servers(source, needs_loopback=needs_loopback)
    [(location, problem)] = imported.unknown_key_problems
    assert location == f"mcpServers.time.{key}"
    assert problem == _toml_problem(entry) == f"unknown key (did you mean {suggestion!r}?)"
    assert imported.unknown_keys == {"time": [key]}
    assert any(problem in warning for warning in imported.warnings), "never dropped silently"


@pytest.mark.parametrize(
    ("entry", "key", "suggestion"),
    [
        ({"comand": "uvx", "args": ["mcp-server-time"]}, "comand", "command"),
        ({"Command": "uvx"}, "Command", "command"),
        ({"cmd": "uvx"}, "cmd", "command"),
        ({"ulr": "https://mcp.example/mcp"}, "ulr", "url"),
    ],
)
def test_a_misspelled_command_or_url_is_named_not_only_the_missing_key(
    tmp_path: Path, entry: dict[str, object], key: str, suggestion: str
) -> None:
    source = write_json(tmp_path / "claude.json", {"mcpServers": {"time": entry}})
    with pytest.raises(ConfigError) as info:
        import_mcp_servers(source, needs_loopback=needs_loopback)
    assert f"  - mcpServers.time.{key}: unknown key (did you mean {suggestion!r}?)\n" in str(info.value)
    assert "needs a 'command' string" in str(info.value)


def test_hostile_key_names_are_named_in_the_written_file_without_breaking_it(tmp_path: Path) -> None:
    keys = ["a\x01b", "line\nbreak", "bidi\u202egnp", "sep\u2028x", "tab\tx", "del\x7fx"]
    source = write_json(
        tmp_path / "claude.json", {"mcpServers": {"time": {"command": "uvx", **dict.fromkeys(keys, 1)}}}
    )
    imported = import_mcp_servers(source, needs_loopback=needs_loopback)
    text = starter_config(imported.servers, imported.comments)
    config_from_mapping(tomllib.loads(text))  # every comment is valid TOML
    for key in keys:
        assert f"# not imported: {key!r}: unknown key" in text
