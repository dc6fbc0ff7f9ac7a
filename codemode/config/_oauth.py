"""``[servers.NAME.oauth]``: signing in to a remote server with OAuth 2.1.

The table's presence turns OAuth on for that server; every key is optional. With none, codemode
discovers the authorization server from the server itself and registers dynamically where the
authorization server offers it. Tokens are never configured here: ``codemode auth login NAME``
obtains them and keeps them in the host's credential store.

``grant = "client_credentials"`` signs in as a machine instead of a person (batch jobs, shared
``serve`` deployments): a client registered beforehand authenticates with a secret or a private
key, and every command obtains its tokens itself, without a browser. Such a client must name the
``issuer`` its credentials belong to, so that a server cannot send them anywhere else.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from codemode.config._secrets import check_references

__all__ = ["DEFAULT_REDIRECT_PORT", "IdentityProviderSettings", "OAuthSettings"]

DEFAULT_REDIRECT_PORT = 33418
"""The loopback port of the sign-in redirect. Fixed by default because an authorization server
records the redirect URI at registration and many refuse a different port afterwards."""


def _absolute_path(value: str | None) -> str | None:
    if value is not None and not value.startswith(("/", "~")):
        raise ValueError("must be an absolute path (or start with ~): every command reads it, from anywhere")
    return value


class IdentityProviderSettings(BaseModel):
    """``[servers.NAME.oauth.identity_provider]``: the enterprise identity provider that turns the
    person's ID token into an identity assertion grant (ID-JAG) for this server (RFC 8693)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_endpoint: str
    """The identity provider's token endpoint, where the exchange happens."""
    client_id: str
    """codemode's client at the identity provider."""
    client_secret: str | None = None
    """Its secret, as a ``${VAR}`` reference, if the identity provider wants one."""
    id_token_file: str | None = None
    """The absolute path of the file where single sign-on keeps the person's ID token (read at
    each sign-in, since it is short-lived)."""
    id_token: str | None = None
    """Or the ID token itself, as a ``${VAR}`` reference."""

    @field_validator("client_id", "client_secret", "id_token")
    @classmethod
    def _references(cls, value: str | None) -> str | None:
        if value is not None:
            check_references(value)
        return value

    @field_validator("token_endpoint")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be the identity provider's token endpoint URL (https://...)")
        return value

    @field_validator("id_token_file")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        return _absolute_path(value)

    @model_validator(mode="after")
    def _one_token(self) -> IdentityProviderSettings:
        if (self.id_token is None) == (self.id_token_file is None):
            raise ValueError("give id_token_file (or id_token): the person's ID token from single sign-on")
        return self


class OAuthSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    client_id: str | None = None
    """A client registered beforehand with the authorization server (pre-registration)."""
    client_secret: str | None = None
    """Its secret, as a ``${VAR}`` reference. Leave it out for a public client."""
    token_endpoint_auth_method: (
        Literal["client_secret_basic", "client_secret_post", "private_key_jwt", "none"] | None
    ) = None
    """How a pre-registered client authenticates at the token endpoint; by default
    ``private_key_jwt`` with a private key, ``client_secret_basic`` with a secret and ``none``
    without either."""
    grant: Literal["authorization_code", "client_credentials", "jwt_bearer", "identity_assertion"] = (
        "authorization_code"
    )
    """``authorization_code``: a person signs in (``codemode auth login``). ``client_credentials``:
    the client itself is the principal; no person and no browser. ``jwt_bearer``: workload
    identity federation, a token that the platform issued to this workload (RFC 7523).
    ``identity_assertion``: enterprise-managed authorization, the person's single sign-on
    exchanged at ``identity_provider`` for a grant to this server."""
    identity_provider: IdentityProviderSettings | None = None
    """For ``identity_assertion``: where the person's ID token is exchanged."""
    issuer: str | None = None
    """The issuer URL of the authorization server that registered ``client_id``. Required with
    ``client_credentials``: tokens are then only asked of that server, whatever the MCP server
    advertises."""
    private_key: str | None = None
    """The client's private key (PEM) as a ``${VAR}`` reference, for ``private_key_jwt``."""
    private_key_file: str | None = None
    """Or the absolute path (``~`` allowed) of a file holding it, readable by the host only."""
    signing_algorithm: Literal["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"] = "RS256"
    """The algorithm of the signed client assertion: the one the key was registered for."""
    assertion_file: str | None = None
    """For ``jwt_bearer``: the absolute path of the file where the platform keeps this workload's
    token (read at each sign-in, since platforms rotate it)."""
    assertion: str | None = None
    """Or the token itself, as a ``${VAR}`` reference."""
    scope: str | None = None
    """The scopes a machine client asks for (space-separated); a person's sign-in takes the
    server's own challenge instead."""
    client_metadata_url: str | None = None
    """An https URL of a client ID metadata document, used as the client id where the
    authorization server supports such documents (instead of registering)."""
    redirect_port: int = Field(default=DEFAULT_REDIRECT_PORT, ge=1024, le=65535)
    """The port of ``http://127.0.0.1:PORT/callback``, where the browser returns after sign-in."""
    client_name: str = "codemode"

    @field_validator("client_id", "client_secret", "private_key", "assertion")
    @classmethod
    def _references(cls, value: str | None) -> str | None:
        if value is not None:
            check_references(value)
        return value

    @field_validator("client_metadata_url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("https://"):
            raise ValueError("must be an https:// URL of a client ID metadata document")
        return value

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("must be the authorization server's issuer URL (https://...)")
        return value

    @field_validator("private_key_file", "assertion_file")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        return _absolute_path(value)

    @model_validator(mode="after")
    def _grant_has_what_it_needs(self) -> OAuthSettings:
        if self.private_key is not None and self.private_key_file is not None:
            raise ValueError("give private_key or private_key_file, not both")
        if self.assertion is not None and self.assertion_file is not None:
            raise ValueError("give assertion or assertion_file, not both")
        keyed = self.private_key is not None or self.private_key_file is not None
        asserted = self.assertion is not None or self.assertion_file is not None
        method = self.token_endpoint_auth_method
        if (self.identity_provider is not None) != (self.grant == "identity_assertion"):
            raise ValueError(
                'an [oauth.identity_provider] table goes with grant = "identity_assertion", and only with it'
            )
        if asserted and self.grant != "jwt_bearer":
            raise ValueError('a workload assertion signs in with grant = "jwt_bearer"')
        if self.grant == "authorization_code":
            if keyed or method == "private_key_jwt":
                raise ValueError(
                    'a private key signs a machine client in: set grant = "client_credentials" (a '
                    "person's sign-in authenticates with client_secret_basic, client_secret_post or none)"
                )
            return self
        if self.client_id is None:
            raise ValueError(f'grant = "{self.grant}" needs the client_id registered for this machine')
        if self.issuer is None:
            raise ValueError(
                f'grant = "{self.grant}" needs issuer = "https://..." (the authorization server that '
                "knows this machine), so its credentials are never sent elsewhere"
            )
        if self.grant == "identity_assertion":
            if self.client_secret is None or keyed or asserted:
                raise ValueError(
                    'grant = "identity_assertion" needs the client_secret of client_id (a confidential '
                    "client), and no private key or assertion"
                )
            if method in ("private_key_jwt", "none"):
                raise ValueError(
                    f"a client secret authenticates with client_secret_basic or _post, not {method}"
                )
            return self
        if self.grant == "jwt_bearer":
            if not asserted or keyed or self.client_secret is not None:
                raise ValueError(
                    'grant = "jwt_bearer" signs in with the platform\'s token alone: give assertion_file '
                    "(or assertion), and no client_secret or private key"
                )
            return self
        self._check_client_credentials(keyed)
        return self

    def _check_client_credentials(self, keyed: bool) -> None:
        method = self.token_endpoint_auth_method
        if keyed == (self.client_secret is not None):
            raise ValueError('grant = "client_credentials" needs either client_secret or a private key')
        if keyed and method not in (None, "private_key_jwt"):
            raise ValueError(f"a private key authenticates with private_key_jwt, not {method}")
        if not keyed and method in ("private_key_jwt", "none"):
            raise ValueError(f"a client secret authenticates with client_secret_basic or _post, not {method}")

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.redirect_port}/callback"
