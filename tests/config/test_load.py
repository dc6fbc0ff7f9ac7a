"""Loading codemode.toml: good files load, bad ones name the file, the key and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.config import (
    HttpServerConfig,
    MissingSecretError,
    StdioServerConfig,
    load_config,
    resolve_references,
)
from codemode.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "codemode.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_stdio_and_an_http_server_load_with_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[servers.docs]
command = "python"
args = ["docs.py"]
env = { TOKEN = "${DOCS_TOKEN}" }

[servers.tickets]
url = "http://127.0.0.1:8000/mcp"
headers = { Authorization = "Bearer ${TICKETS_TOKEN}" }
trusted = true
call_timeout = 5
""",
    )
    config = load_config(path)
    docs = config.servers["docs"]
    tickets = config.servers["tickets"]
    assert isinstance(docs, StdioServerConfig)
    assert isinstance(tickets, HttpServerConfig)
    assert docs.env == {"TOKEN": "${DOCS_TOKEN}"}, "references stay unresolved until connect time"
    assert docs.trusted is False
    assert tickets.trusted is True
    assert tickets.call_timeout == 5
    assert config.lock_path == tmp_path / "codemode.lock"
    assert config.ledger_path == tmp_path / "codemode.db"


def test_malformed_toml_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[servers.docs]\ncommand = = 'python'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message
    assert "not valid TOML" in message
    assert "line 2" in message


def test_an_unknown_key_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "[servers.docs]\ncomand = 'python'\ncommand = 'python'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [("servers.docs.comand", "unknown key (did you mean 'command'?)")]


def test_an_unknown_section_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[sandbox]\nmemory = 512\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    location, message = info.value.problems[0]
    assert location == "sandbox.memory"
    assert "memory_mb" in message


def test_a_server_without_command_or_url_says_what_it_needs(tmp_path: Path) -> None:
    path = write(tmp_path, "[servers.docs]\nargs = ['x']\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "needs either 'command'" in str(info.value)


@pytest.mark.parametrize(("key", "suggestion"), [("comand", "command"), ("ulr", "url"), ("URL", "url")])
def test_a_misspelt_only_key_is_named_with_a_suggestion(tmp_path: Path, key: str, suggestion: str) -> None:
    path = write(tmp_path, f"[servers.docs]\n{key} = 'python'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert (f"servers.docs.{key}", f"unknown key (did you mean {suggestion!r}?)") in info.value.problems
    assert "needs either 'command'" in str(info.value), "and what the server still needs"


def test_bad_values_are_reported_per_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[servers.web]
url = "ftp://example.invalid/mcp"
connect_timeout = -1
""",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    problems = dict(info.value.problems)
    assert "must start with http://" in problems["servers.web.url"]
    assert "greater than 0" in problems["servers.web.connect_timeout"]


def test_a_stray_dollar_sign_in_a_secret_reference_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "[servers.a]\ncommand = 'x'\nenv = { K = 'pa$word' }\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "stray '$'" in str(info.value)


def test_an_invalid_server_name_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, '[servers."bad name"]\ncommand = "x"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "bad name" in str(info.value)


def test_a_missing_file_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.toml")
    assert "codemode init" in str(info.value)


def test_the_config_path_comes_from_the_environment_when_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "[servers.a]\ncommand = 'x'\n")
    monkeypatch.setenv("CODEMODE_CONFIG", str(path))
    assert set(load_config().servers) == {"a"}


def test_references_resolve_from_the_given_environment_only() -> None:
    assert resolve_references("Bearer ${T}", {"T": "abc"}) == "Bearer abc"
    assert resolve_references("cost: $$5", {}) == "cost: $5"
    with pytest.raises(MissingSecretError) as info:
        resolve_references("${NOT_THERE}", {})
    assert info.value.variable == "NOT_THERE"
