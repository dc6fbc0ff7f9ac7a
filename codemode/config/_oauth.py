"""``[servers.NAME.oauth]``: signing in to a remote server with OAuth 2.1.

The table's presence turns OAuth on for that server; every key is optional. With none, codemode
discovers the authorization server from the server itself and registers dynamically where the
authorization server offers it. Tokens are never configured here: ``codemode auth login NAME``
obtains them and keeps them in the host's credential store.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from codemode.config._secrets import check_references

__all__ = ["DEFAULT_REDIRECT_PORT", "OAuthSettings"]

DEFAULT_REDIRECT_PORT = 33418
"""The loopback port of the sign-in redirect. Fixed by default because an authorization server
records the redirect URI at registration and many refuse a different port afterwards."""


class OAuthSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    client_id: str | None = None
    """A client registered beforehand with the authorization server (pre-registration)."""
    client_secret: str | None = None
    """Its secret, as a ``${VAR}`` reference. Leave it out for a public client."""
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post", "none"] | None = None
    """How a pre-registered client authenticates at the token endpoint; by default
    ``client_secret_basic`` with a secret and ``none`` without."""
    client_metadata_url: str | None = None
    """An https URL of a client ID metadata document, used as the client id where the
    authorization server supports such documents (instead of registering)."""
    redirect_port: int = Field(default=DEFAULT_REDIRECT_PORT, ge=1024, le=65535)
    """The port of ``http://127.0.0.1:PORT/callback``, where the browser returns after sign-in."""
    client_name: str = "codemode"

    @field_validator("client_id", "client_secret")
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

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.redirect_port}/callback"
