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


MACHINE = '[servers.remote.oauth]\ngrant = "client_credentials"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (MACHINE + 'issuer = "https://as.example.test"\nclient_secret = "${S}"\n', "needs the client_id"),
        (MACHINE + 'client_id = "m"\nclient_secret = "${S}"\n', "needs issuer"),
        (
            MACHINE + 'client_id = "m"\nissuer = "https://as.example.test"\n',
            "either client_secret or a private key",
        ),
        (
            MACHINE + 'client_id = "m"\nissuer = "https://as.example.test"\nclient_secret = "${S}"\n'
            'private_key = "${K}"\n',
            "either client_secret or a private key",
        ),
        (MACHINE + 'client_id = "m"\nissuer = "as.example.test"\nclient_secret = "${S}"\n', "issuer URL"),
        (
            MACHINE + 'client_id = "m"\nissuer = "https://as.example.test"\nprivate_key_file = "key.pem"\n',
            "absolute path",
        ),
        (
            MACHINE + 'client_id = "m"\nissuer = "https://as.example.test"\nprivate_key = "${K}"\n'
            'private_key_file = "/k.pem"\n',
            "not both",
        ),
        (
            MACHINE + 'client_id = "m"\nissuer = "https://as.example.test"\nprivate_key = "${K}"\n'
            'token_endpoint_auth_method = "client_secret_post"\n',
            "private_key_jwt, not client_secret_post",
        ),
        (
            MACHINE + 'client_id = "m"\nissuer = "https://as.example.test"\nclient_secret = "${S}"\n'
            'token_endpoint_auth_method = "none"\n',
            "client_secret_basic or _post, not none",
        ),
        ('[servers.remote.oauth]\nprivate_key = "${K}"\n', 'set grant = "client_credentials"'),
        ('[servers.remote.oauth]\ngrant = "password"\n', "grant"),
        ('[servers.remote.oauth]\nassertion_file = "/run/token"\n', 'grant = "jwt_bearer"'),
        (
            '[servers.remote.oauth]\ngrant = "jwt_bearer"\nclient_id = "w"\nissuer = "https://as.example.test"\n',
            "give assertion_file",
        ),
        (
            '[servers.remote.oauth]\ngrant = "jwt_bearer"\nclient_id = "w"\nissuer = "https://as.example.test"\n'
            'assertion_file = "/run/token"\nclient_secret = "${S}"\n',
            "no client_secret or private key",
        ),
        (
            '[servers.remote.oauth]\ngrant = "jwt_bearer"\nclient_id = "w"\nassertion_file = "/t"\n',
            "needs issuer",
        ),
        (
            MACHINE + 'client_id = "m"\nissuer = "https://as.example.test"\nprivate_key = "-----BEGIN $"\n',
            "stray",
        ),
    ],
)
def test_an_incomplete_machine_client_is_refused_with_what_is_missing(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_a_machine_client_with_a_secret_or_a_key_file_loads(tmp_path: Path) -> None:
    secret = load_config(
        write(
            tmp_path,
            MACHINE + 'client_id = "m"\nissuer = "https://as.example.test"\nclient_secret = "${S}"\n',
        )
    ).servers["remote"]
    assert isinstance(secret, HttpServerConfig) and secret.oauth is not None
    assert (secret.oauth.grant, secret.oauth.signing_algorithm) == ("client_credentials", "RS256")
    keyed = load_config(
        write(
            tmp_path,
            MACHINE + 'client_id = "m"\nissuer = "https://as.example.test"\nprivate_key_file = "~/m.pem"\n'
            'signing_algorithm = "ES256"\nscope = "read write"\n',
        )
    ).servers["remote"]
    assert isinstance(keyed, HttpServerConfig) and keyed.oauth is not None
    assert (keyed.oauth.private_key_file, keyed.oauth.signing_algorithm, keyed.oauth.scope) == (
        "~/m.pem",
        "ES256",
        "read write",
    )
