"""Enterprise-managed authorization (``grant = "identity_assertion"``): the person's ID token is
exchanged at the identity provider for a grant to one server, and each way it can fail says what
to do.

The identity provider here is a real HTTP server on 127.0.0.1; the whole two-legged flow against
the conformance suite's own identity provider, authorization server and MCP server, through the
public CLI, is the ``auth/enterprise-managed-authorization`` scenario of
``tests/conformance/test_conformance_auth.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import anyio
import pytest

from codemode.auth import FileCredentialStore, HostAuth
from codemode.auth._enterprise import exchanged_at
from codemode.config import HttpServerConfig, OAuthSettings, load_config
from codemode.errors import AuthError, ConfigError, UnsafeURLError
from codemode.net import NetworkPolicy

RESOURCE = "https://mcp.example.test/mcp"
ISSUER = "https://as.example.test"


class IdentityProvider:
    """Answers each token exchange with ``answer`` and keeps each form it was sent."""

    def __init__(self, answer: tuple[int, dict[str, str]]) -> None:
        self.answer = answer
        self.forms: list[dict[str, list[str]]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                owner.forms.append(parse_qs(self.rfile.read(length).decode()))
                status, body = owner.answer
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"


@pytest.fixture
def idp_answering() -> Iterator[IdentityProvider]:
    idp = IdentityProvider((200, {}))
    thread = threading.Thread(target=idp.httpd.serve_forever, daemon=True)
    thread.start()
    yield idp
    idp.httpd.shutdown()
    idp.httpd.server_close()


def enterprise(token_endpoint: str, id_token_file: Path) -> HttpServerConfig:
    oauth = OAuthSettings.model_validate(
        {
            "grant": "identity_assertion",
            "issuer": ISSUER,
            "client_id": "mcp-client",
            "client_secret": "${MCP_CLIENT_SECRET}",
            "identity_provider": {
                "token_endpoint": token_endpoint,
                "client_id": "codemode-at-idp",
                "id_token_file": str(id_token_file),
            },
        }
    )
    return HttpServerConfig(url=RESOURCE, oauth=oauth, allow_loopback=True)


def exchange(config: HttpServerConfig) -> str:
    """The first leg alone: what the SDK's provider asks for before its own token request."""
    assert config.oauth is not None
    assert config.oauth.identity_provider is not None
    policy = NetworkPolicy(allow_loopback=config.allow_loopback)
    provider = exchanged_at("crm", config.oauth.identity_provider, policy, {})
    return anyio.run(provider, ISSUER, RESOURCE)


@pytest.mark.integration  # a real identity provider on 127.0.0.1
def test_the_id_token_is_exchanged_for_a_grant_to_this_server(
    idp_answering: IdentityProvider, tmp_path: Path
) -> None:
    (tmp_path / "id-token").write_text("person.id.token\n", encoding="utf-8")
    idp_answering.answer = (
        200,
        {"access_token": "the.id.jag", "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag"},
    )

    grant = exchange(enterprise(idp_answering.url, tmp_path / "id-token"))

    assert grant == "the.id.jag"
    (form,) = idp_answering.forms
    assert form["grant_type"] == ["urn:ietf:params:oauth:grant-type:token-exchange"]
    assert form["subject_token"] == ["person.id.token"]
    assert form["requested_token_type"] == ["urn:ietf:params:oauth:token-type:id-jag"]
    assert (form["audience"], form["resource"], form["client_id"]) == (
        [ISSUER],
        [RESOURCE],
        ["codemode-at-idp"],
    )
    assert "client_secret" not in form  # the MCP client's secret is for its own authorization server


@pytest.mark.integration
@pytest.mark.parametrize(
    "answer",
    [
        (400, {"error": "invalid_grant"}),
        (
            200,
            {
                "access_token": "an.access.token",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            },
        ),
    ],
    ids=["refused", "not a grant"],
)
def test_an_exchange_that_gives_no_grant_says_to_sign_in_again(
    idp_answering: IdentityProvider, tmp_path: Path, answer: tuple[int, dict[str, str]]
) -> None:
    (tmp_path / "id-token").write_text("expired.id.token", encoding="utf-8")
    idp_answering.answer = answer
    with pytest.raises(AuthError, match=r"did not exchange the ID token.*sign in to single sign-on again"):
        exchange(enterprise(idp_answering.url, tmp_path / "id-token"))


def test_a_missing_id_token_is_named_at_start_and_a_private_idp_address_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AuthError, match=r"identity_provider.id_token_file .*absent.* cannot be read"):
        HostAuth(store=FileCredentialStore(tmp_path / "c.json")).auth_for(
            "crm",
            enterprise("https://idp.example.test/token", tmp_path / "absent"),
            RESOURCE,
            {"MCP_CLIENT_SECRET": "x"},
        )
    (tmp_path / "id-token").write_text("person.id.token", encoding="utf-8")
    guarded = enterprise("http://0x7f000001:9/token", tmp_path / "id-token").model_copy(
        update={"allow_loopback": False}
    )
    with pytest.raises(UnsafeURLError, match="loopback"):
        exchange(guarded)


CLIENT = 'grant = "identity_assertion"\nclient_id = "c"\nissuer = "https://as.test"\n'
SECRET = 'client_secret = "${S}"\n'
IDP = '[servers.remote.oauth.identity_provider]\ntoken_endpoint = "https://idp.test/t"\nclient_id = "i"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (CLIENT + SECRET, "identity_provider"),
        (CLIENT + IDP + 'id_token = "${T}"\n', "confidential"),
        ('client_id = "c"\n' + IDP + 'id_token = "${T}"\n', "identity_provider"),
        (CLIENT + SECRET + IDP, "id_token_file"),
    ],
)
def test_an_incomplete_enterprise_client_is_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "codemode.toml"
    path.write_text('[servers.remote]\nurl = "https://mcp.example.test/mcp"\n[servers.remote.oauth]\n' + text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)
