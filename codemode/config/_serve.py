"""The ``[serve]`` section: how ``codemode serve`` exposes the single run-code tool."""

from __future__ import annotations

import socket
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from codemode.config._policy import PolicyConfig
from codemode.config._secrets import check_references

OPERATOR = "operator"
ROLES = (OPERATOR,)
"""Roles a bearer token may carry; ``operator`` may open ``codemode serve --console``."""
EVERY_TENANT = "*"
"""``console_tenants = ["*"]``: the operator sees and answers every tenant's runs."""


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
    console_tenants: list[str] | None = None
    """Operators only: whose runs, calls and pending approvals the console shows this token's
    holder (and lets it answer). Unset: only the tenant this token's own runs get. ``["*"]``:
    every tenant, which also opens the console's ledger verify page (it covers the whole ledger)."""

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

    @field_validator("console_tenants")
    @classmethod
    def _tenant_names(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            # An empty list would open a console that shows nothing: surely not what was meant.
            raise ValueError(
                'list the tenants this operator may see (e.g. console_tenants = ["acme"]), or ["*"] '
                "for every tenant; leave it out for the token's own tenant"
            )
        if any(not name.strip() for name in value):
            raise ValueError(
                'a tenant name must not be empty: write e.g. console_tenants = ["acme", "globex"]'
            )
        if EVERY_TENANT in value and len(value) > 1:
            raise ValueError(
                '"*" already means every tenant: write console_tenants = ["*"] alone, or list the tenants'
            )
        globbed = [name for name in value if EVERY_TENANT in name and name != EVERY_TENANT]
        if globbed:
            # Tenant names are matched exactly; a pattern would silently match nothing.
            raise ValueError(
                f"{globbed[0]!r} is not a tenant name: console_tenants takes whole names "
                '(e.g. ["acme", "globex"]) or ["*"] for every tenant, not patterns'
            )
        return value

    @model_validator(mode="after")
    def _console_tenants_need_operator(self) -> TokenGrant:
        if self.console_tenants is not None and OPERATOR not in self.roles:
            raise ValueError(
                "console_tenants says which tenants an operator sees in the console, and this token "
                f'is no operator: add roles = ["{OPERATOR}"], or remove console_tenants'
            )
        return self


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
    drain_s: float = Field(default=30.0, ge=0, le=3600)
    """On SIGTERM (or SIGHUP, Ctrl-C), the HTTP server stops taking runs and gives the runs in
    flight this long to finish before it cancels them (a second signal cancels them at once)."""
    replica: str = Field(default="", max_length=200)
    """This process's name among several ``serve`` replicas on one ledger, for the messages that
    say where a sandbox session or a waiting run lives; default ``host:port``."""

    @property
    def replica_name(self) -> str:
        return self.replica or f"{socket.gethostname()}:{self.port}"


class _Caller(NamedTuple):
    where: str
    """The key that binds it."""
    name: str
    """How a message names it."""
    principal: str
    tenant: str | None
    operator: bool
    rebind: str
    """The other fix: bind it elsewhere."""


def identity_problems(serve: ServeConfig, policy: PolicyConfig) -> list[str]:
    """Callers of ``codemode serve`` whose every run the policy would refuse: a token (or the
    ``[serve]`` stdio caller, when set) bound to a tenant its principal is not in, or a
    principal that deny mode does not know. Each names the table to change and what to add.

    An operator token whose principal deny mode does not know is left alone: it may open only
    the console (see ``console_tenants``), which needs no runs of its own.
    """
    callers = [
        _Caller(
            f"serve.tokens.{name}",
            "this token",
            grant.principal,
            grant.tenant,
            OPERATOR in grant.roles,
            "change this token's tenant",
        )
        for name, grant in serve.tokens.items()
    ]
    if serve.principal is not None or serve.tenant is not None:
        principal = serve.principal or policy.default_principal
        callers.append(
            _Caller("serve", "the stdio caller", principal, serve.tenant, False, "change [serve] tenant")
        )
    return [problem for caller in callers if (problem := _refused(caller, policy)) is not None]


def _refused(caller: _Caller, policy: PolicyConfig) -> str | None:
    rules = policy.principal(caller.principal)
    table = f"[policy.principals.{caller.principal}]"
    if rules is None:
        if caller.operator:
            return None
        return (
            f'{caller.where}: the policy denies by default (mode = "deny") and has no {table}, so '
            f"every run of {caller.name} would be refused: add {table} with its tenants and tools"
        )
    tenant = caller.tenant
    if tenant is None or tenant in rules.tenants:
        return None
    if caller.principal in policy.principals:
        now = ", ".join(f'"{t}"' for t in rules.tenants)
        fix = f'add "{tenant}" to {table} tenants (now [{now}])'
    else:
        fix = (
            f'add {table} with tenants = ["{tenant}"] (without that table the principal is only in '
            f'the default tenant, "{policy.default_tenant}")'
        )
    return (
        f'{caller.where}: principal "{caller.principal}" is not in tenant "{tenant}", so every run '
        f"of {caller.name} would be refused: {fix}, or {caller.rebind}"
    )
