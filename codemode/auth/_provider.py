"""The OAuth 2.1 client of one remote server, on the MCP SDK's ``OAuthClientProvider``.

The SDK does the protocol: protected-resource and authorization-server metadata discovery with
their fallbacks, PKCE S256, the ``resource`` parameter and its check against the server,
client ID metadata documents or dynamic registration, ``iss`` validation, scope selection and
step-up, and refresh. codemode adds what belongs to the host:

- tokens and registrations live in the host's :class:`CredentialStore`, keyed by the server's
  resource URL, with the checked metadata of the tokens' issuer; their remaining lifetime
  survives a restart, so an expired token is refreshed, not sent, and at that issuer's token
  endpoint (the SDK, holding no metadata yet, would guess one on the MCP server's origin);
- the person's part of the flow goes through a :class:`SignIn` (browser, headless or none);
- every request of the flow goes out through the server's HTTP client, whose transport is the
  SSRF guard.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.utils import issuers_match, union_scopes
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
)
from pydantic import AnyUrl, ValidationError

from codemode.auth._sign_in import SignIn
from codemode.auth._store import CredentialStore, StoredCredentials
from codemode.config import HttpServerConfig, OAuthSettings, resolve_references
from codemode.errors import AuthError

__all__ = ["StoreTokenStorage", "oauth_client", "preregistered_client"]


def _not_the_flow_trace(record: logging.LogRecord) -> bool:
    # The SDK logs every failed flow with a traceback before re-raising it; codemode reports the
    # same error once, as a message that says what to do.
    return record.getMessage() != "OAuth flow error"


logging.getLogger("mcp.client.auth.oauth2").addFilter(_not_the_flow_trace)


class StoreTokenStorage:
    """The SDK's ``TokenStorage`` over one record of a :class:`CredentialStore`."""

    def __init__(
        self,
        store: CredentialStore,
        resource: str,
        server: str,
        preregistered: OAuthClientInformationFull | None = None,
    ) -> None:
        self._store = store
        self._resource = resource
        self._server = server
        self._preregistered = preregistered

    def _record(self) -> StoredCredentials:
        return self._store.get(self._resource) or StoredCredentials(server=self._server)

    async def get_tokens(self) -> OAuthToken | None:
        record = self._record()
        if record.tokens is None:
            return None
        tokens = OAuthToken.model_validate(record.tokens)
        expires_at = record.expires_at()
        if expires_at is not None:
            # What is left of the lifetime: the SDK dates a token from when it is handed one.
            tokens.expires_in = max(0, int(expires_at - time.time()))
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        record = self._record()
        record.tokens = tokens.model_dump(mode="json", exclude_none=True)
        record.obtained_at = time.time()
        self._store.put(self._resource, record)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        if self._preregistered is not None:
            return self._preregistered
        record = self._record()
        return OAuthClientInformationFull.model_validate(record.client) if record.client else None

    def remember_scope(self, authorization_url: str) -> str:
        """``authorization_url`` asking for every scope wanted so far, which is recorded first.

        A step-up (403 ``insufficient_scope``) in a command that cannot sign in leaves its scope
        here, so that ``codemode auth login`` asks for it too: there the challenge that starts
        the flow names only what the first request needs."""
        parts = urlsplit(authorization_url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        asked = next((value for key, value in query if key == "scope"), None)
        record = self._record()
        wanted = union_scopes(record.wanted_scope, asked)
        if wanted is None:
            return authorization_url
        if wanted != record.wanted_scope:
            record.wanted_scope = wanted
            self._store.put(self._resource, record)
        query = [(key, value) for key, value in query if key != "scope"] + [("scope", wanted)]
        return urlunsplit(parts._replace(query=urlencode(query)))

    def remember_issuer(self, metadata: OAuthMetadata) -> None:
        """Record the checked metadata of the authorization server that just issued the tokens."""
        record = self._record()
        record.metadata = metadata.model_dump(mode="json", exclude_none=True)
        # A pre-registered client's registration names no issuer: the tokens' issuer is this one.
        record.issuer = record.issuer or str(metadata.issuer)
        self._store.put(self._resource, record)

    def issuer_metadata(self) -> OAuthMetadata | None:
        """The recorded metadata of the tokens' issuer; None if none was recorded (a record from
        before it was kept) or it is not the issuer's, or is damaged."""
        record = self._record()
        if record.metadata is None or record.issuer is None:
            return None
        try:
            metadata = OAuthMetadata.model_validate(record.metadata)
        except ValidationError:
            return None
        return metadata if issuers_match(str(metadata.issuer), record.issuer) else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        record = self._record()
        if client_info.issuer != record.issuer:
            record.tokens = None  # tokens of another issuer never travel with a new registration
        record.client = client_info.model_dump(mode="json", exclude_none=True)
        record.issuer = client_info.issuer
        self._store.put(self._resource, record)


class _Provider(OAuthClientProvider):
    def __init__(self, *, storage: StoreTokenStorage, **options: Any) -> None:
        super().__init__(storage=storage, **options)
        self._records = storage

    async def _initialize(self) -> None:
        await super()._initialize()
        if self.context.current_tokens is None:
            return
        metadata = self._records.issuer_metadata()
        if metadata is None:
            # Without it the SDK would refresh at a guessed endpoint on the resource's origin,
            # handing it the refresh token and the client secret. Undated, the token is sent as
            # it is; a refusal starts the flow, which finds and checks the metadata first.
            return
        self.context.oauth_metadata = metadata
        # Loaded tokens carry their remaining lifetime (StoreTokenStorage.get_tokens); dating
        # them makes an expired one refresh instead of being sent and refused.
        self.context.update_token_expiry(self.context.current_tokens)

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)
        if self.context.oauth_metadata is not None:  # checked against the issuer by the flow
            self._records.remember_issuer(self.context.oauth_metadata)


def preregistered_client(
    settings: OAuthSettings, environ: Mapping[str, str]
) -> OAuthClientInformationFull | None:
    """The client registered beforehand that ``settings`` names (its secret resolved), if any."""
    if settings.client_id is None:
        return None
    secret = resolve_references(settings.client_secret, environ) if settings.client_secret else None
    method = settings.token_endpoint_auth_method or ("client_secret_basic" if secret else "none")
    return OAuthClientInformationFull(
        client_id=resolve_references(settings.client_id, environ),
        client_secret=secret,
        redirect_uris=[AnyUrl(settings.redirect_uri)],
        token_endpoint_auth_method=method,
    )


def oauth_client(
    server: str,
    config: HttpServerConfig,
    url: str,
    *,
    store: CredentialStore,
    sign_in: SignIn,
    environ: Mapping[str, str],
) -> OAuthClientProvider:
    """The ``httpx2.Auth`` that signs ``server``'s requests (``config.oauth`` must be set)."""
    settings = config.oauth
    assert settings is not None
    redirect_uri = settings.redirect_uri
    preregistered = preregistered_client(settings, environ)
    answers: list[AuthorizationCodeResult] = []
    storage = StoreTokenStorage(store, url, server, preregistered)

    async def redirect(authorization_url: str) -> None:
        require_pkce(provider.context.oauth_metadata)
        authorization_url = storage.remember_scope(authorization_url)
        answers.append(await sign_in.authorize(authorization_url, redirect_uri))

    async def callback() -> AuthorizationCodeResult:
        return answers.pop()

    provider = _Provider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name=settings.client_name,
            redirect_uris=[AnyUrl(redirect_uri)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=redirect,
        callback_handler=callback,
        client_metadata_url=settings.client_metadata_url,
    )
    return provider


def require_pkce(metadata: OAuthMetadata | None) -> None:
    """PKCE with S256 or no authorization at all: without the advertisement a client cannot know
    that the server checks the verifier, and a stolen code would be enough."""
    methods = metadata.code_challenge_methods_supported if metadata is not None else None
    if not methods or "S256" not in methods:
        raise AuthError(
            "the authorization server does not advertise PKCE with S256 "
            "(code_challenge_methods_supported); codemode does not sign in without it"
        )
