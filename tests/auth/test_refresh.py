"""After a restart, an expired token is refreshed at its issuer's token endpoint, and nowhere else.

The SDK refreshes at the token endpoint of the authorization server metadata it holds, and without
any at ``/token`` on the MCP server's own origin. A fresh process holds none until a request is
refused, so codemode records the checked metadata with the tokens and restores it: otherwise the
refresh token and the client secret would go to the MCP server, a different party from the
authorization server that issued them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from codemode.auth import FileCredentialStore, NoSignIn, StoredCredentials, oauth_client
from codemode.config import HttpServerConfig, OAuthSettings

RESOURCE = "https://mcp.example.test/mcp"
ISSUER = "https://auth.example.test"
TOKEN_ENDPOINT = f"{ISSUER}/oauth2/token"
SECRETS = ("REFRESH-TOKEN-SECRET", "CLIENT-SECRET")

pytestmark = pytest.mark.anyio


def metadata(issuer: str = ISSUER) -> dict[str, Any]:
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/oauth2/authorize",
        "token_endpoint": f"{issuer}/oauth2/token",
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
    }


def expired_record(**fields: Any) -> StoredCredentials:
    """Signed in an hour ago with a token that lived a minute, as a new process finds it."""
    return StoredCredentials(
        server="remote",
        issuer=ISSUER,
        client={
            "client_id": "cid",
            "client_secret": "CLIENT-SECRET",
            "token_endpoint_auth_method": "client_secret_post",
            "redirect_uris": ["http://127.0.0.1:33418/callback"],
            "issuer": ISSUER,
        },
        tokens={"access_token": "OLD", "token_type": "Bearer", "expires_in": 60, "refresh_token": SECRETS[0]},
        obtained_at=time.time() - 3600,
        **fields,
    )


async def requests_after_restart(tmp_path: Path, record: StoredCredentials) -> list[httpx2.Request]:
    """Every request one MCP request makes in a fresh process with ``record`` stored."""
    store = FileCredentialStore(tmp_path / "credentials.json")
    store.put(RESOURCE, record)
    seen: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        if str(request.url) == TOKEN_ENDPOINT:
            return httpx2.Response(
                200, json={"access_token": "NEW", "token_type": "Bearer", "expires_in": 60}
            )
        return httpx2.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": {}})

    auth = oauth_client(
        "remote",
        HttpServerConfig(url=RESOURCE, oauth=OAuthSettings()),
        RESOURCE,
        store=store,
        sign_in=NoSignIn("remote"),
        environ={},
    )
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(answer), auth=auth) as client:
        await client.post(RESOURCE, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    return seen


def carrying_secrets(requests: list[httpx2.Request]) -> list[str]:
    return [str(r.url) for r in requests if any(s in r.content.decode() + str(r.headers) for s in SECRETS)]


async def test_an_expired_token_is_refreshed_at_the_recorded_issuers_token_endpoint(tmp_path: Path) -> None:
    seen = await requests_after_restart(tmp_path, expired_record(metadata=metadata()))
    assert [str(r.url) for r in seen] == [TOKEN_ENDPOINT, RESOURCE]
    assert carrying_secrets(seen) == [TOKEN_ENDPOINT], "the refresh token goes to its issuer only"
    assert seen[-1].headers["authorization"] == "Bearer NEW"


@pytest.mark.parametrize(
    "unknown",
    [
        pytest.param({}, id="a record from before the metadata was kept"),
        pytest.param({"metadata": metadata("https://elsewhere.example.test")}, id="another issuer's"),
        pytest.param({"metadata": {"issuer": ISSUER}}, id="damaged"),
    ],
)
async def test_without_the_issuers_metadata_nothing_secret_leaves_and_the_token_is_sent_as_it_is(
    tmp_path: Path, unknown: dict[str, Any]
) -> None:
    seen = await requests_after_restart(tmp_path, expired_record(**unknown))
    assert carrying_secrets(seen) == [], "no guessed token endpoint gets the refresh token or the secret"
    assert [str(r.url) for r in seen] == [RESOURCE]
    assert seen[0].headers["authorization"] == "Bearer OLD", "a refusal would start the flow, metadata first"
