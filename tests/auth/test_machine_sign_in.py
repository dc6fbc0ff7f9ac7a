"""Machine sign-in (``grant = "client_credentials"`` and ``"jwt_bearer"``): the token request,
where the tokens go, and where the credentials never go.

The authorization and resource servers here are an in-process ``MockTransport``: it lets a test
look inside each request (the Basic header, the signed assertion) and point the server at another
issuer. The same flows against the MCP conformance suite's own servers, through the public CLI,
are the ``auth/client-credentials-basic``, ``auth/client-credentials-jwt`` and
``auth/wif-jwt-bearer`` scenarios of
``tests/conformance/test_conformance_auth.py``.
"""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import parse_qs

import anyio
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from mcp.client.auth import OAuthFlowError

from codemode.auth import FileCredentialStore, HostAuth
from codemode.config import HttpServerConfig, OAuthSettings
from codemode.errors import AuthError

RESOURCE = "http://rs.test/mcp"
ISSUER = "http://as.test"
ELSEWHERE = "http://elsewhere.test"


class Servers:
    """A resource server that wants a bearer token, and two authorization servers."""

    def __init__(self, advertised: str = ISSUER) -> None:
        self.advertised = advertised
        self.token_requests: list[httpx2.Request] = []
        self.requests: list[str] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        url = str(request.url)
        self.requests.append(url)
        origin = f"{request.url.scheme}://{request.url.host}"
        if url == RESOURCE:
            if request.headers.get("authorization") == "Bearer machine-token":
                return httpx2.Response(200, json={"ok": True})
            challenge = 'Bearer resource_metadata="http://rs.test/.well-known/oauth-protected-resource/mcp"'
            return httpx2.Response(401, headers={"WWW-Authenticate": challenge})
        if url.startswith("http://rs.test/.well-known/oauth-protected-resource"):
            return httpx2.Response(
                200, json={"resource": RESOURCE, "authorization_servers": [self.advertised]}
            )
        if request.url.path.startswith("/.well-known/oauth-authorization-server"):
            return httpx2.Response(
                200,
                json={
                    "issuer": origin,
                    "authorization_endpoint": f"{origin}/authorize",
                    "token_endpoint": f"{origin}/token",
                    "grant_types_supported": ["client_credentials"],
                    "response_types_supported": ["code"],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic", "private_key_jwt"],
                },
            )
        if request.url.path == "/token":
            self.token_requests.append(request)
            return httpx2.Response(
                200, json={"access_token": "machine-token", "token_type": "Bearer", "expires_in": 3600}
            )
        return httpx2.Response(404)


def machine(tmp_path: Path, **settings: str) -> HttpServerConfig:
    oauth = OAuthSettings.model_validate(
        {"grant": "client_credentials", "client_id": "batch-runner", "issuer": ISSUER, **settings}
    )
    return HttpServerConfig(url=RESOURCE, oauth=oauth)


def call(
    servers: Servers, config: HttpServerConfig, store: FileCredentialStore, environ: dict[str, str]
) -> httpx2.Response:
    auth = HostAuth(store=store).auth_for("remote", config, RESOURCE, environ)
    assert auth is not None

    async def go() -> httpx2.Response:
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(servers.handle), auth=auth) as client:
            return await client.post(RESOURCE, json={})

    return anyio.run(go)


def test_a_client_secret_gets_a_token_without_a_person_and_only_the_token_is_stored(tmp_path: Path) -> None:
    servers, store = Servers(), FileCredentialStore(tmp_path / "credentials.json")
    config = machine(tmp_path, client_secret="${RUNNER_SECRET}")

    answer = call(servers, config, store, {"RUNNER_SECRET": "s3cret-value"})

    assert answer.status_code == 200
    (token_request,) = servers.token_requests
    assert parse_qs(token_request.content.decode())["grant_type"] == ["client_credentials"]
    basic = base64.b64decode(token_request.headers["authorization"].removeprefix("Basic ")).decode()
    assert basic == "batch-runner:s3cret-value"
    record = store.get(RESOURCE)
    assert record is not None and record.tokens is not None
    assert (record.tokens["access_token"], record.issuer) == ("machine-token", ISSUER)
    assert "s3cret-value" not in (tmp_path / "credentials.json").read_text()

    # The next command finds the stored token and asks for no other.
    assert call(servers, config, store, {"RUNNER_SECRET": "s3cret-value"}).status_code == 200
    assert len(servers.token_requests) == 1


def test_a_private_key_signs_a_short_assertion_for_the_issuer(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    (tmp_path / "runner.pem").write_text(pem, encoding="utf-8")
    servers, store = Servers(), FileCredentialStore(tmp_path / "credentials.json")
    config = machine(tmp_path, private_key_file=str(tmp_path / "runner.pem"), signing_algorithm="ES256")

    assert call(servers, config, store, {}).status_code == 200

    (token_request,) = servers.token_requests
    form = parse_qs(token_request.content.decode())
    assert form["client_assertion_type"] == ["urn:ietf:params:oauth:client-assertion-type:jwt-bearer"]
    claims = jwt.decode(form["client_assertion"][0], key.public_key(), algorithms=["ES256"], audience=ISSUER)
    assert (claims["iss"], claims["sub"]) == ("batch-runner", "batch-runner")
    assert claims["exp"] - claims["iat"] <= 60
    assert "authorization" not in token_request.headers
    assert "PRIVATE KEY" not in (tmp_path / "credentials.json").read_text()


def test_a_server_that_points_at_another_issuer_never_receives_the_credentials(tmp_path: Path) -> None:
    servers, store = Servers(advertised=ELSEWHERE), FileCredentialStore(tmp_path / "credentials.json")
    config = machine(tmp_path, client_secret="${RUNNER_SECRET}")

    with pytest.raises(OAuthFlowError, match=f"issuer mismatch: {ELSEWHERE} != {ISSUER}"):
        call(servers, config, store, {"RUNNER_SECRET": "s3cret-value"})

    assert servers.token_requests == []
    assert not any(url.startswith(ELSEWHERE + "/token") for url in servers.requests)
    record = store.get(RESOURCE)
    assert record is None or record.tokens is None


def test_a_key_that_cannot_sign_is_refused_at_start_without_showing_it(tmp_path: Path) -> None:
    config = machine(tmp_path, private_key="${RUNNER_KEY}", signing_algorithm="ES256")
    store = FileCredentialStore(tmp_path / "credentials.json")

    with pytest.raises(AuthError, match="cannot sign ES256") as refused:
        HostAuth(store=store).auth_for("remote", config, RESOURCE, {"RUNNER_KEY": "not-a-pem-key-material"})
    assert "not-a-pem-key-material" not in str(refused.value)

    missing = machine(tmp_path, private_key_file=str(tmp_path / "absent.pem"))
    with pytest.raises(AuthError, match=r"private_key_file .*absent\.pem.* cannot be read"):
        HostAuth(store=store).auth_for("remote", missing, RESOURCE, {})


def test_a_workload_signs_in_with_the_platforms_token_read_afresh_each_time(tmp_path: Path) -> None:
    token_file = tmp_path / "workload-token"
    token_file.write_text("platform.issued.jwt-1\n", encoding="utf-8")
    servers, store = Servers(), FileCredentialStore(tmp_path / "credentials.json")
    config = machine(tmp_path, grant="jwt_bearer", assertion_file=str(token_file))

    assert call(servers, config, store, {}).status_code == 200
    token_file.write_text("platform.issued.jwt-2\n", encoding="utf-8")  # the platform rotated it
    store.delete(RESOURCE)
    assert call(servers, config, store, {}).status_code == 200

    forms = [parse_qs(request.content.decode()) for request in servers.token_requests]
    assert [form["grant_type"] for form in forms] == [["urn:ietf:params:oauth:grant-type:jwt-bearer"]] * 2
    assert [form["assertion"] for form in forms] == [["platform.issued.jwt-1"], ["platform.issued.jwt-2"]]
    assert forms[0]["client_id"] == ["batch-runner"]
    assert "authorization" not in servers.token_requests[0].headers


def test_a_workload_token_never_goes_to_another_issuer_and_a_missing_file_is_named(tmp_path: Path) -> None:
    token_file = tmp_path / "workload-token"
    token_file.write_text("platform.issued.jwt", encoding="utf-8")
    servers, store = Servers(advertised=ELSEWHERE), FileCredentialStore(tmp_path / "credentials.json")
    config = machine(tmp_path, grant="jwt_bearer", assertion_file=str(token_file))

    with pytest.raises(OAuthFlowError, match=f"issuer mismatch: {ELSEWHERE} != {ISSUER}"):
        call(servers, config, store, {})
    assert servers.token_requests == []

    missing = machine(tmp_path, grant="jwt_bearer", assertion_file=str(tmp_path / "absent"))
    with pytest.raises(AuthError, match=r"assertion_file .*absent.* cannot be read"):
        HostAuth(store=store).auth_for("remote", missing, RESOURCE, {})
