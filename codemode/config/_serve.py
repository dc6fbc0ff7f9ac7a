"""The ``[serve]`` section: how ``codemode serve`` exposes the single run-code tool."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from codemode.config._secrets import check_references

ROLES = ("operator",)
"""Roles a bearer token may carry; ``operator`` may open ``codemode serve --console``."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TokenGrant(_Section):
    """A bearer token for ``codemode serve --transport http`` and who it acts as."""

    token: str = Field(min_length=1)
    """Write it as a ``${ENV_VAR}`` reference; it is resolved when the server starts."""
    principal: str
    tenant: str | None = None
    roles: list[str] = Field(default_factory=lambda: [])
    """What else the holder may do besides calling tools: ``operator`` opens the operator console."""

    @field_validator("roles")
    @classmethod
    def _known_roles(cls, value: list[str]) -> list[str]:
        unknown = [role for role in value if role not in ROLES]
        if unknown:
            raise ValueError(
                f"unknown role {unknown[0]!r}: the roles codemode knows are {', '.join(ROLES)} "
                '(e.g. roles = ["operator"])'
            )
        return value

    @field_validator("token")
    @classmethod
    def _reference(cls, value: str) -> str:
        check_references(value)
        return value


class ServeConfig(_Section):
    principal: str | None = None
    """Principal for stdio clients (and HTTP without tokens); default: policy.default_principal."""
    tenant: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65_535)
    path: str = "/mcp"
    allowed_hosts: list[str] = Field(default_factory=lambda: [])
    """Names (``host`` or ``host:port``) clients reach the HTTP endpoint by, besides ``host``
    itself: the Host header must name one (DNS-rebinding protection). Required when ``host`` is
    ``0.0.0.0`` or ``::``, which no client names."""
    allowed_origins: list[str] = Field(default_factory=lambda: [])
    """Browser origins allowed to call the HTTP endpoint (besides none). DNS-rebinding protection
    always checks Host and Origin."""
    tokens: dict[str, TokenGrant] = Field(default_factory=lambda: {})
    """Bearer tokens → principals. Required when ``host`` is not a loopback address."""
    session_idle_s: float = Field(default=600.0, gt=0)
    """A ``run_code`` session unused for this long is closed (its sandbox destroyed)."""
    max_sessions: int = Field(default=8, ge=0, le=1024)
    """Live sessions at most; the least recently used one is closed to make room."""
    progress_interval_s: float = Field(default=1.0, gt=0)
