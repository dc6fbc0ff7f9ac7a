"""Ending a sign-in at the authorization server too: token revocation (RFC 7009).

Deleting the local record alone leaves the tokens valid until they expire, and a refresh token
often lives for weeks: a copy taken from a backup or a stolen disk would go on working. So
``codemode auth logout`` first asks the authorization server to revoke them, the refresh token
first (revoking it should end the access tokens minted from it, RFC 7009 §2.1), then the access
token.

The revocation endpoint comes from the authorization server's metadata (RFC 8414), found from the
issuer that minted the record's tokens and checked to name that issuer. The requests go through
the SSRF guard with the server's network policy, and authenticate as the client the tokens were
issued to (the pre-registered one, or the stored registration), as the token endpoint would.

Revocation is best effort by design: an authorization server without the endpoint, or one that
cannot be reached, does not keep the person signed in here. The outcome says what happened so the
command can tell them which tokens may still be valid.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import httpx2
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    issuers_match,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata
from pydantic import ValidationError

from codemode.auth._store import StoredCredentials
from codemode.errors import AuthError
from codemode.net import GuardedTransport, NetworkPolicy

__all__ = ["Revocation", "revoke_tokens"]

_TOKEN_KINDS = ("refresh_token", "access_token")  # the refresh token first: see the module's text
REVOKE_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Revocation:
    """What the authorization server was told."""

    revoked: tuple[str, ...]
    """The kinds of token it accepted to revoke (``refresh_token``, ``access_token``)."""
    problem: str | None = None
    """Why a token held was not revoked, in words for the person; None when nothing was left."""

    def revoked_words(self) -> str:
        """``refresh token and access token``: what was revoked, for the person."""
        return " and ".join(_words(kind) for kind in self.revoked)


async def revoke_tokens(
    record: StoredCredentials,
    client: OAuthClientInformationFull | None,
    policy: NetworkPolicy,
    *,
    resource: str,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> Revocation:
    """Revoke the tokens of ``record`` at its issuer, authenticating as ``client`` (else the
    record's registration). Never raises for the server's sake: the outcome says what failed."""
    tokens = {
        kind: token
        for kind in _TOKEN_KINDS
        if isinstance(token := (record.tokens or {}).get(kind), str) and token
    }
    if not tokens:
        return Revocation(())
    if client is None and record.client:
        try:
            client = OAuthClientInformationFull.model_validate(record.client)
        except ValidationError:
            client = None
    if client is None:
        return Revocation((), "the stored record names no client, so the tokens could not be revoked")
    guarded = transport or GuardedTransport(policy)
    issuer = record.issuer or resource
    try:
        async with httpx2.AsyncClient(
            transport=guarded, follow_redirects=False, timeout=REVOKE_TIMEOUT_S
        ) as http:
            # A pre-registered client's record names no issuer (no registration was stored): the
            # resource names its authorization server, as it did at sign-in.
            issuer = record.issuer or await _authorization_server(http, resource)
            metadata = await _metadata(http, issuer, resource)
            if metadata is None:
                return Revocation((), f"the metadata of {issuer} could not be read")
            if metadata.revocation_endpoint is None:
                return Revocation((), f"{issuer} offers no token revocation (RFC 7009)")
            revoked: list[str] = []
            for kind, token in tokens.items():
                data, headers = _authenticated({"token": token, "token_type_hint": kind}, client)
                response = await http.post(str(metadata.revocation_endpoint), data=data, headers=headers)
                if response.status_code != 200:  # RFC 7009 §2.2: 200 whether or not the token was valid
                    return Revocation(
                        tuple(revoked), f"revoking the {_words(kind)} failed: {_refusal(response)}"
                    )
                revoked.append(kind)
    except (httpx2.HTTPError, OSError) as exc:
        return Revocation((), f"{issuer} could not be reached ({type(exc).__name__})")
    except Exception as exc:
        return Revocation((), f"revocation at {issuer} failed: {str(exc)[:200]}")
    return Revocation(tuple(revoked))


async def _authorization_server(http: httpx2.AsyncClient, resource: str) -> str:
    """The first authorization server the resource's metadata (RFC 9728) lists, as at sign-in; the
    resource's origin where it publishes none (the 2025-03-26 layout)."""
    for url in build_protected_resource_metadata_discovery_urls(None, resource):
        found = await handle_protected_resource_response(await http.get(url))
        if found is not None and found.authorization_servers:
            return str(found.authorization_servers[0])
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}"


async def _metadata(http: httpx2.AsyncClient, issuer: str, resource: str) -> OAuthMetadata | None:
    """The issuer's authorization server metadata, found as the SDK finds it at sign-in."""
    for url in build_oauth_authorization_server_metadata_discovery_urls(issuer, resource):
        go_on, metadata = await handle_auth_metadata_response(await http.get(url))
        if metadata is not None:
            if not issuers_match(str(metadata.issuer), issuer):
                raise AuthError(f"the metadata at {url} is for another issuer, {metadata.issuer}")
            return metadata
        if not go_on:
            return None
    return None


def _authenticated(
    data: Mapping[str, str], client: OAuthClientInformationFull
) -> tuple[dict[str, str], dict[str, str]]:
    """``data`` and headers carrying the client's authentication (RFC 6749 §2.3.1) as the SDK sends
    it to the token endpoint: the ``client_id`` in the form, and a confidential client's secret in
    HTTP Basic or the form."""
    client_id = client.client_id or ""
    form: dict[str, str] = {**data, "client_id": client_id}
    headers: dict[str, str] = {}
    secret, method = client.client_secret, client.token_endpoint_auth_method
    if secret and method == "client_secret_basic":
        pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    elif secret and method == "client_secret_post":
        form["client_secret"] = secret
    return form, headers


def _words(kind: str) -> str:
    return kind.replace("_", " ")


def _refusal(response: httpx2.Response) -> str:
    """The status and the OAuth error code of a refusal (never its body: it may echo the token)."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    code = f" {error[:64]}" if isinstance(error, str) else ""
    return f"HTTP {response.status_code}{code}"
