"""Machine sign-in: OAuth grants for clients that act for themselves.

A batch job on a cluster or a team's ``serve`` has no person to open a browser. Its client was
registered beforehand with the authorization server and proves who it is with a secret
(``client_secret_basic`` / ``_post``) or a private key (``private_key_jwt``, RFC 7523: a
short-lived assertion signed here, its audience the issuer): the client-credentials grant, done
by the MCP SDK's providers. Or the platform it runs on vouches for it with a token of its own
(workload identity federation): the JWT-bearer grant (RFC 7523, section 2.1), done here.
codemode adds what it does for a person's tokens:

- the tokens live in the host's credential store, keyed by the server's resource URL, with the
  issuer that granted them; nothing of them reaches the sandbox;
- the credentials go only to the configured ``issuer``: a server that points elsewhere stops the
  flow instead of receiving them;
- the secret and the key are read from ``${VAR}`` references or a file, each time a command
  connects, and are never stored or logged (a referenced value is redacted everywhere);
- every request goes out through the server's HTTP client, whose transport is the SSRF guard.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.utils import issuers_match
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata

from codemode.auth._files import read_credential_file
from codemode.auth._provider import StoreTokenStorage
from codemode.auth._store import CredentialStore
from codemode.config import OAuthSettings, resolve_references
from codemode.errors import AuthError

__all__ = ["machine_client"]

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"

_PUBLIC_CLIENT: Final = "none"
"""The JWT-bearer grant's token endpoint authentication: the assertion is the proof."""

_ASSERTION_LIFETIME_S = 60
"""A signed assertion is used once, right away: a minute covers clock skew and nothing more."""


class _RemembersIssuer(OAuthClientProvider):
    """Records the checked metadata of the issuer that granted the tokens, as a person's do."""

    def __init__(self, *, records: StoreTokenStorage, **options: Any) -> None:
        super().__init__(**options)
        self._records = records

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)
        if self.context.oauth_metadata is not None:
            self._records.remember_issuer(self.context.oauth_metadata)


class _SecretClient(_RemembersIssuer, ClientCredentialsOAuthProvider):
    pass


class _KeyClient(_RemembersIssuer, PrivateKeyJWTOAuthProvider):
    pass


class _WorkloadClient(_RemembersIssuer):
    """The JWT-bearer grant: the platform's token is the whole proof, sent to the configured
    issuer only, read afresh at each sign-in, and never retried in another grant on failure."""

    def __init__(self, *, issuer: str, client_id: str, assertion: Callable[[], str], **options: Any) -> None:
        metadata = OAuthClientMetadata(
            redirect_uris=None, grant_types=[JWT_BEARER], token_endpoint_auth_method=_PUBLIC_CLIENT
        )
        super().__init__(client_metadata=metadata, redirect_handler=None, callback_handler=None, **options)
        self._issuer = issuer
        self._assertion = assertion
        self._client = OAuthClientInformationFull(
            redirect_uris=None,
            client_id=client_id,
            grant_types=[JWT_BEARER],
            token_endpoint_auth_method=_PUBLIC_CLIENT,
        )

    async def _initialize(self) -> None:
        self.context.current_tokens = await self.context.storage.get_tokens()
        self.context.client_info = self._client
        self._initialized = True

    def _select_authorization_server(self, advertised: list[str]) -> str:
        return next((server for server in advertised if issuers_match(server, self._issuer)), advertised[0])

    async def _perform_authorization(self) -> httpx2.Request:
        metadata = self.context.oauth_metadata
        if metadata is None or not issuers_match(str(metadata.issuer), self._issuer):
            self.context.clear_tokens()
            found = "none" if metadata is None else str(metadata.issuer)
            raise OAuthFlowError(f"Authorization server metadata issuer mismatch: {found} != {self._issuer}")
        form: dict[str, str] = {"grant_type": JWT_BEARER, "assertion": self._assertion()}
        form["client_id"] = self._client.client_id
        if self.context.should_include_resource_param(self.context.protocol_version):
            form["resource"] = self.context.get_resource_url()
        if self.context.client_metadata.scope:
            form["scope"] = self.context.client_metadata.scope
        return httpx2.Request(
            "POST",
            self._get_token_endpoint(),
            data=form,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )


def machine_client(
    server: str, settings: OAuthSettings, url: str, *, store: CredentialStore, environ: Mapping[str, str]
) -> OAuthClientProvider:
    """The ``httpx2.Auth`` of a server whose ``grant`` is ``client_credentials`` or ``jwt_bearer``."""
    assert settings.issuer is not None  # the config checked both
    assert settings.client_id is not None
    client_id = resolve_references(settings.client_id, environ)
    storage = StoreTokenStorage(store, url, server)
    common: dict[str, Any] = {"records": storage, "server_url": url, "storage": storage}
    if settings.grant == "jwt_bearer":
        return _WorkloadClient(
            **common,
            issuer=settings.issuer,
            client_id=client_id,
            assertion=_workload_token(server, settings, environ),
        )
    if settings.client_secret is not None:
        method = settings.token_endpoint_auth_method
        return _SecretClient(
            **common,
            client_id=client_id,
            client_secret=resolve_references(settings.client_secret, environ),
            token_endpoint_auth_method="client_secret_post"
            if method == "client_secret_post"
            else "client_secret_basic",
            scope=settings.scope,
            issuer=settings.issuer,
        )
    return _KeyClient(
        **common,
        client_id=client_id,
        assertion_provider=_signed_assertions(server, settings, client_id, environ),
        scope=settings.scope,
        issuer=settings.issuer,
    )


def _signed_assertions(
    server: str, settings: OAuthSettings, client_id: str, environ: Mapping[str, str]
) -> Callable[[str], Awaitable[str]]:
    key = _private_key(server, settings, environ)
    _check_signing(server, settings, key)
    return SignedJWTParameters(
        issuer=client_id,
        subject=client_id,
        signing_key=key,
        signing_algorithm=settings.signing_algorithm,
        lifetime_seconds=_ASSERTION_LIFETIME_S,
    ).create_assertion_provider()


def _private_key(server: str, settings: OAuthSettings, environ: Mapping[str, str]) -> str:
    if settings.private_key is not None:
        return resolve_references(settings.private_key, environ)
    assert settings.private_key_file is not None  # config checked that one of the two is set
    return read_credential_file(
        server, "private_key_file", settings.private_key_file, "the PEM file of the client's key"
    )


def _workload_token(server: str, settings: OAuthSettings, environ: Mapping[str, str]) -> Callable[[], str]:
    """The platform's token, read now (so a missing file is told at start) and at each sign-in."""
    if settings.assertion is not None:
        token = resolve_references(settings.assertion, environ)
        return lambda: token
    path = settings.assertion_file
    assert path is not None  # config checked that one of the two is set
    read_credential_file(
        server, "assertion_file", path, "the file where the platform keeps this workload's token"
    )
    return lambda: read_credential_file(server, "assertion_file", path, "the platform's token file").strip()


def _check_signing(server: str, settings: OAuthSettings, key: str) -> None:
    """Sign once at start-up, so a wrong key or a missing library is told now, by name, and not
    as an unexplained failure in the middle of the first call."""
    import jwt  # the MCP SDK's own dependency; the algorithms with keys need `cryptography`

    claims: dict[str, Any] = {"probe": True}
    try:
        jwt.encode(claims, key, algorithm=settings.signing_algorithm)
    except NotImplementedError:
        raise AuthError(
            f"[servers.{server}.oauth] signing with {settings.signing_algorithm} needs the "
            "'cryptography' package: pip install 'codemode[machine-auth]'"
        ) from None
    except (ValueError, TypeError, jwt.PyJWTError) as exc:
        raise AuthError(
            f"[servers.{server}.oauth] the private key cannot sign {settings.signing_algorithm} "
            f"assertions ({type(exc).__name__}); give the PEM of the key registered for this client "
            "and its signing_algorithm"
        ) from None
