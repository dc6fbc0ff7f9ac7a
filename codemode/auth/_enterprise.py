"""Enterprise-managed authorization: a person's single sign-on, exchanged for a grant to one server.

The person signed in once, at the company's identity provider; its ID token sits where single
sign-on keeps it. For each MCP server codemode asks that identity provider to exchange the ID token
for an identity assertion authorization grant (ID-JAG, RFC 8693 token exchange) whose audience is
the server's authorization server, and hands that grant to the authorization server with the
JWT-bearer grant (RFC 7523). No browser, no consent screen per server: the company's policy at the
identity provider decides.

The second leg is the MCP SDK's ``IdentityAssertionOAuthProvider``: its authorization server is
configuration, never what the MCP server advertises, so neither the grant nor the client secret can
be sent elsewhere. The first leg is here, through a client whose transport is the SSRF guard with
the server's own network allowances, and with credentials allowed to the identity provider's
origin only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import httpx2
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

from codemode.auth._files import read_credential_file
from codemode.auth._provider import StoreTokenStorage
from codemode.auth._store import CredentialStore
from codemode.config import HttpServerConfig, IdentityProviderSettings, resolve_references
from codemode.errors import AuthError
from codemode.net import GuardedTransport, NetworkPolicy

__all__ = ["enterprise_client"]

# The RFC 8693 names of a grant and of token types (ruff's S105 takes "TOKEN" names for secrets).
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # noqa: S105
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"  # noqa: S105
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


def enterprise_client(
    server: str, config: HttpServerConfig, url: str, *, store: CredentialStore, environ: Mapping[str, str]
) -> httpx2.Auth:
    """The ``httpx2.Auth`` of a ``grant = "identity_assertion"`` server."""
    settings = config.oauth
    assert settings is not None  # the caller checked each of these
    assert settings.identity_provider is not None
    assert settings.client_id is not None
    assert settings.client_secret is not None
    assert settings.issuer is not None
    method = settings.token_endpoint_auth_method
    policy = NetworkPolicy(allow_loopback=config.allow_loopback, allow_private=config.allow_private_network)
    return IdentityAssertionOAuthProvider(
        server_url=url,
        storage=StoreTokenStorage(store, url, server),
        client_id=resolve_references(settings.client_id, environ),
        client_secret=resolve_references(settings.client_secret, environ),
        issuer=settings.issuer,
        assertion_provider=exchanged_at(server, settings.identity_provider, policy, environ),
        scope=settings.scope,
        token_endpoint_auth_method="client_secret_post"
        if method == "client_secret_post"
        else "client_secret_basic",
    )


def exchanged_at(
    server: str, provider: IdentityProviderSettings, policy: NetworkPolicy, environ: Mapping[str, str]
) -> Callable[[str, str], Awaitable[str]]:
    id_token = _id_token(server, provider, environ)
    id_token()  # a missing token file is told at start, not at the first call
    client_id = resolve_references(provider.client_id, environ)
    secret = resolve_references(provider.client_secret, environ) if provider.client_secret else None

    async def exchange(audience: str, resource: str) -> str:
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": id_token(),
            "subject_token_type": ID_TOKEN,
            "requested_token_type": ID_JAG,
            "audience": audience,
            "resource": resource,
            "client_id": client_id,
        }
        transport = GuardedTransport(policy, audience=provider.token_endpoint)
        async with httpx2.AsyncClient(transport=transport, follow_redirects=False, timeout=30.0) as client:
            if secret:
                answer = await client.post(
                    provider.token_endpoint, data=form, auth=httpx2.BasicAuth(client_id, secret)
                )
            else:
                answer = await client.post(provider.token_endpoint, data=form)
        return _grant_in(server, answer)

    return exchange


def _grant_in(server: str, answer: httpx2.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        body = None
    if answer.status_code == 200 and isinstance(body, dict):
        grant = body.get("access_token")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if isinstance(grant, str) and grant and body.get("issued_token_type") == ID_JAG:  # pyright: ignore[reportUnknownMemberType]
            return grant
    error = body.get("error") if isinstance(body, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    raise AuthError(
        f"the identity provider of {server} did not exchange the ID token for a grant "
        f"(HTTP {answer.status_code}{f', {error}' if isinstance(error, str) else ''}); sign in to single "
        "sign-on again if the ID token expired, or check [oauth.identity_provider]"
    )


def _id_token(
    server: str, provider: IdentityProviderSettings, environ: Mapping[str, str]
) -> Callable[[], str]:
    if provider.id_token is not None:
        token = resolve_references(provider.id_token, environ)
        return lambda: token
    path = provider.id_token_file
    assert path is not None  # the config checked that one of the two is set
    return lambda: read_credential_file(
        server, "identity_provider.id_token_file", path, "the ID token"
    ).strip()
