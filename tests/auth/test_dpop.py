"""DPoP: where the authorization server offers it, tokens are bound to a key kept on the host and
sent with a fresh proof per request; nonces are honoured; where it is not offered, nothing changes.

The servers here are an in-process ``MockTransport`` so that each proof can be checked (its
signature against the key in its header, ``htm``, ``htu``, ``ath``, ``nonce``). The same flows
against the conformance suite's own servers, through the public CLI and a person's sign-in, are
the ``auth/dpop`` and ``auth/dpop-nonce`` scenarios of ``tests/conformance/test_conformance_auth.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from jwt.algorithms import ECAlgorithm

from codemode.auth import FileCredentialStore, HostAuth
from codemode.config import HttpServerConfig, OAuthSettings

RESOURCE = "http://rs.test/mcp"
ISSUER = "http://as.test"


class Servers:
    """An MCP server and its authorization server, which may offer DPoP and may want nonces."""

    def __init__(self, *, dpop: bool, nonce: str | None = None) -> None:
        self.dpop = dpop
        self.nonce = nonce
        self.proofs: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        """(where, header, claims) of every proof received, in order."""
        self.authorizations: list[str] = []

    def check_proof(self, request: httpx2.Request, where: str) -> dict[str, Any] | None:
        proof = request.headers.get("DPoP")
        if proof is None:
            return None
        header = jwt.get_unverified_header(proof)
        assert header["typ"] == "dpop+jwt"
        assert header["alg"] == "ES256"
        key = ECAlgorithm.from_jwk(json.dumps(header["jwk"]))
        claims = jwt.decode(proof, key, algorithms=["ES256"])  # pyright: ignore[reportArgumentType]
        assert claims["htm"] == request.method
        assert claims["htu"] == str(request.url).split("?")[0]
        self.proofs.append((where, header, claims))
        return claims

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        url = str(request.url)
        if url == RESOURCE:
            return self._resource(request)
        if url.startswith("http://rs.test/.well-known/oauth-protected-resource"):
            return httpx2.Response(200, json={"resource": RESOURCE, "authorization_servers": [ISSUER]})
        if request.url.path.startswith("/.well-known/oauth-authorization-server"):
            metadata: dict[str, Any] = {
                "issuer": ISSUER,
                "authorization_endpoint": f"{ISSUER}/authorize",
                "token_endpoint": f"{ISSUER}/token",
                "response_types_supported": ["code"],
            }
            if self.dpop:
                metadata["dpop_signing_alg_values_supported"] = ["ES256"]
            return httpx2.Response(200, json=metadata)
        if request.url.path == "/token":
            claims = self.check_proof(request, "token")
            if claims is not None and self.nonce is not None and claims.get("nonce") != self.nonce:
                return httpx2.Response(
                    400, headers={"DPoP-Nonce": self.nonce}, json={"error": "use_dpop_nonce"}
                )
            kind = "DPoP" if claims is not None else "Bearer"
            return httpx2.Response(
                200, json={"access_token": "tok-1", "token_type": kind, "expires_in": 3600}
            )
        return httpx2.Response(404)

    def _resource(self, request: httpx2.Request) -> httpx2.Response:
        authorization = request.headers.get("authorization", "")
        self.authorizations.append(authorization.split(" ")[0])
        challenge = 'Bearer resource_metadata="http://rs.test/.well-known/oauth-protected-resource/mcp"'
        if not authorization.endswith(" tok-1"):
            return httpx2.Response(401, headers={"WWW-Authenticate": challenge})
        claims = self.check_proof(request, "resource")
        if claims is not None:
            assert authorization == "DPoP tok-1"
            ath = base64.urlsafe_b64encode(hashlib.sha256(b"tok-1").digest()).rstrip(b"=").decode()
            assert claims["ath"] == ath
            if self.nonce is not None and claims.get("nonce") != self.nonce:
                return httpx2.Response(
                    401,
                    headers={"WWW-Authenticate": 'DPoP error="use_dpop_nonce"', "DPoP-Nonce": self.nonce},
                )
        return httpx2.Response(200, json={"ok": True})


def call(servers: Servers, store: FileCredentialStore) -> httpx2.Response:
    oauth = OAuthSettings.model_validate(
        {"grant": "client_credentials", "client_id": "m", "client_secret": "${S}", "issuer": ISSUER}
    )
    auth = HostAuth(store=store).auth_for(
        "remote", HttpServerConfig(url=RESOURCE, oauth=oauth), RESOURCE, {"S": "dpop-client-secret-value"}
    )
    assert auth is not None

    async def go() -> httpx2.Response:
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(servers.handle), auth=auth) as client:
            return await client.post(RESOURCE, json={})

    return anyio.run(go)


def test_an_offered_dpop_binds_the_token_and_every_request_carries_a_fresh_proof(tmp_path: Path) -> None:
    servers, store = Servers(dpop=True), FileCredentialStore(tmp_path / "credentials.json")

    assert call(servers, store).status_code == 200
    assert call(servers, store).status_code == 200  # a second command: the stored token and key

    assert [where for where, _, _ in servers.proofs] == ["token", "resource", "resource"]
    assert len({claims["jti"] for _, _, claims in servers.proofs}) == 3
    assert len({json.dumps(header["jwk"], sort_keys=True) for _, header, _ in servers.proofs}) == 1
    assert all("d" not in header["jwk"] for _, header, _ in servers.proofs)  # only the public half
    assert "Bearer" not in servers.authorizations[1:]
    record = store.get(RESOURCE)
    assert record is not None and record.dpop_bound and record.dpop_key is not None
    assert record.tokens is not None and record.tokens["access_token"] == "tok-1"


def test_nonces_asked_for_by_either_server_are_sent_on_the_retry(tmp_path: Path) -> None:
    servers, store = Servers(dpop=True, nonce="n-42"), FileCredentialStore(tmp_path / "credentials.json")

    assert call(servers, store).status_code == 200

    nonces = [(where, claims.get("nonce")) for where, _, claims in servers.proofs]
    assert nonces[0] == ("token", None)
    assert ("token", "n-42") in nonces
    assert nonces[-1] == ("resource", "n-42")


def test_without_dpop_on_offer_nothing_changes(tmp_path: Path) -> None:
    servers, store = Servers(dpop=False), FileCredentialStore(tmp_path / "credentials.json")

    assert call(servers, store).status_code == 200

    assert servers.proofs == []
    assert servers.authorizations[-1] == "Bearer"
    record = store.get(RESOURCE)
    assert record is not None and record.dpop_key is None and not record.dpop_bound


def test_without_the_keys_library_a_dpop_offer_is_declined_and_bearer_tokens_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)  # as on a core install without the extra
    servers, store = Servers(dpop=True), FileCredentialStore(tmp_path / "credentials.json")

    assert call(servers, store).status_code == 200

    assert servers.proofs == []
    assert servers.authorizations[-1] == "Bearer"
    assert "pip install 'codemode[machine-auth]'" in caplog.text
