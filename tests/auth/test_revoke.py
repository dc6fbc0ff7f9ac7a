"""Token revocation at logout (RFC 7009), against answers an authorization server could give: it
is best effort and never raises, and what it reports never carries a token or a secret."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from urllib.parse import parse_qs

import anyio
import httpx2
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import AnyUrl

from codemode.auth._revoke import Revocation, revoke_tokens
from codemode.auth._store import StoredCredentials
from codemode.net import GuardedTransport, NetworkPolicy

ISSUER = "https://auth.example"
RESOURCE = "https://mcp.example/mcp"
METADATA: dict[str, object] = {
    "issuer": ISSUER,
    "authorization_endpoint": f"{ISSUER}/authorize",
    "token_endpoint": f"{ISSUER}/token",
    "revocation_endpoint": f"{ISSUER}/revoke",
    "response_types_supported": ["code"],
}
RECORD = StoredCredentials(
    server="remote",
    issuer=ISSUER,
    client={"client_id": "dcr-client", "redirect_uris": ["http://127.0.0.1:33418/callback"]},
    tokens={"access_token": "AT-secret", "refresh_token": "RT-secret", "token_type": "Bearer"},
)


def confidential(method: str) -> OAuthClientInformationFull:
    return OAuthClientInformationFull(
        client_id="pre/registered",
        client_secret="s3:cret",
        redirect_uris=[AnyUrl("http://127.0.0.1:33418/callback")],
        token_endpoint_auth_method=method,  # pyright: ignore[reportArgumentType]
    )


class AuthorizationServer:
    """Serves its metadata and answers /revoke with ``revoke``; keeps every request it saw."""

    def __init__(
        self,
        metadata: Mapping[str, object] = METADATA,
        revoke: Callable[[httpx2.Request], httpx2.Response] = lambda _: httpx2.Response(200),
    ) -> None:
        self.requests: list[httpx2.Request] = []
        self._metadata, self._revoke = metadata, revoke

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if request.url.path == "/.well-known/oauth-authorization-server":
            return httpx2.Response(200, json=self._metadata)
        if request.url.path == "/revoke":
            return self._revoke(request)
        return httpx2.Response(404)

    def revocations(self) -> list[dict[str, list[str]]]:
        return [parse_qs(r.content.decode()) for r in self.requests if r.url.path == "/revoke"]


def revoke(
    server: AuthorizationServer,
    record: StoredCredentials = RECORD,
    client: OAuthClientInformationFull | None = None,
) -> Revocation:
    async def go() -> Revocation:
        transport = httpx2.MockTransport(server.handle)
        return await revoke_tokens(record, client, NetworkPolicy(), resource=RESOURCE, transport=transport)

    return anyio.run(go)


def test_the_refresh_token_is_revoked_first_then_the_access_token() -> None:
    server = AuthorizationServer()
    assert revoke(server) == Revocation(("refresh_token", "access_token"))
    forms = server.revocations()
    assert [f["token_type_hint"] for f in forms] == [["refresh_token"], ["access_token"]]
    assert [f["token"] for f in forms] == [["RT-secret"], ["AT-secret"]]
    assert all(
        f["client_id"] == ["dcr-client"] and "client_secret" not in f for f in forms
    )  # a public client


def test_a_confidential_client_authenticates_as_at_the_token_endpoint() -> None:
    basic = AuthorizationServer()
    assert revoke(basic, client=confidential("client_secret_basic")).problem is None
    request = next(r for r in basic.requests if r.url.path == "/revoke")
    decoded = base64.b64decode(request.headers["authorization"].removeprefix("Basic ")).decode()
    assert decoded == "pre%2Fregistered:s3%3Acret" and "client_secret" not in basic.revocations()[0]
    post = AuthorizationServer()
    assert revoke(post, client=confidential("client_secret_post")).problem is None
    assert post.revocations()[0]["client_secret"] == ["s3:cret"]
    assert "authorization" not in next(r for r in post.requests if r.url.path == "/revoke").headers


def test_a_refusal_is_reported_without_echoing_the_token() -> None:
    echo = {"error": "invalid_client", "error_description": "bad client for token RT-secret"}
    server = AuthorizationServer(revoke=lambda _: httpx2.Response(401, json=echo))
    outcome = revoke(server)
    assert outcome.revoked == () and outcome.problem is not None
    assert "HTTP 401 invalid_client" in outcome.problem and "secret" not in outcome.problem
    assert len(server.revocations()) == 1  # stops at the first refusal


def test_a_server_without_revocation_or_unreachable_or_lying_is_only_reported() -> None:
    without = AuthorizationServer({k: v for k, v in METADATA.items() if k != "revocation_endpoint"})
    assert "offers no token revocation" in str(revoke(without).problem)

    other = AuthorizationServer({**METADATA, "issuer": "https://elsewhere.example"})
    outcome = revoke(other)
    assert outcome.revoked == () and other.revocations() == []  # metadata of another issuer: no token sent

    broken = AuthorizationServer(revoke=lambda _: httpx2.Response(500, text="<html>oops"))
    assert "HTTP 500" in str(revoke(broken).problem)

    def unreachable(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    async def go() -> Revocation:
        return await revoke_tokens(
            RECORD, None, NetworkPolicy(), resource=RESOURCE, transport=httpx2.MockTransport(unreachable)
        )

    assert "could not be reached" in str(anyio.run(go).problem)


def test_the_ssrf_guard_refuses_an_issuer_the_policy_does_not_allow() -> None:
    record = RECORD.model_copy(update={"issuer": "http://0x7f000001"})
    seen: list[httpx2.Request] = []

    def inner(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=METADATA)

    async def go() -> Revocation:
        guard = GuardedTransport(NetworkPolicy(), inner=httpx2.MockTransport(inner))
        return await revoke_tokens(record, None, NetworkPolicy(), resource=RESOURCE, transport=guard)

    outcome = anyio.run(go)
    assert outcome.revoked == () and outcome.problem is not None and seen == []


def test_nothing_to_revoke_sends_nothing() -> None:
    server = AuthorizationServer()
    assert revoke(server, RECORD.model_copy(update={"tokens": None})) == Revocation(())
    no_client = RECORD.model_copy(update={"client": None})
    assert "names no client" in str(revoke(server, no_client).problem)
    assert server.requests == []


def test_without_an_issuer_the_resource_names_its_authorization_server() -> None:
    # A pre-registered client's record: the resource's metadata (RFC 9728) leads to the issuer.
    def handle(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/.well-known/oauth-protected-resource/mcp":
            return httpx2.Response(200, json={"resource": RESOURCE, "authorization_servers": [f"{ISSUER}/"]})
        return server.handle(request)

    server = AuthorizationServer()

    async def go() -> Revocation:
        record = RECORD.model_copy(update={"issuer": None})
        return await revoke_tokens(
            record, None, NetworkPolicy(), resource=RESOURCE, transport=httpx2.MockTransport(handle)
        )

    assert anyio.run(go) == Revocation(("refresh_token", "access_token"))
    assert str(server.requests[0].url) == f"{ISSUER}/.well-known/oauth-authorization-server"
