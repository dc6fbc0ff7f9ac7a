"""``[servers.NAME.oauth]`` and the network allowances: mistakes are refused with what to write."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.config import HttpServerConfig, load_config
from codemode.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "codemode.toml"
    path.write_text('[servers.remote]\nurl = "https://mcp.example.test/mcp"\n' + text, encoding="utf-8")
    return path


def test_an_empty_oauth_table_turns_oauth_on_with_the_defaults(tmp_path: Path) -> None:
    server = load_config(write(tmp_path, "[servers.remote.oauth]\n")).servers["remote"]
    assert isinstance(server, HttpServerConfig) and server.oauth is not None
    assert server.oauth.redirect_uri == "http://127.0.0.1:33418/callback"
    assert (server.allow_loopback, server.allow_private_network) == (False, False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[servers.remote.oauth]\nclient_ld = "x"\n', "did you mean 'client_id'"),
        ('[servers.remote.oauth]\nclient_metadata_url = "http://x.example.test/c.json"\n', "https:// URL"),
        ("[servers.remote.oauth]\nredirect_port = 80\n", "redirect_port"),
        ('[servers.remote.oauth]\nclient_secret = "${UNCLOSED"\n', "client_secret"),
        ('[servers.remote.oauth]\ntoken_endpoint_auth_method = "private_key_jwt"\n', "client_secret_basic"),
        ("allow_loopbak = true\n", "did you mean 'allow_loopback'"),
    ],
)
def test_oauth_mistakes_are_refused_by_name(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))
