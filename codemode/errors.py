"""The one error tree of codemode.

Every error that crosses a public seam is a :class:`CodemodeError`. Lower-level exceptions
(pydantic, the MCP SDK, docker-py, sqlite3, OS errors) are mapped at the seam with
``raise X(...) from exc`` so callers catch one family and still see the cause.

Each error carries a message written for the person who has to fix it: what went wrong,
where, and what to do next.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthError",
    "AuthRequiredError",
    "CatalogError",
    "ChannelError",
    "CodemodeError",
    "ConfigError",
    "LedgerError",
    "MissingSecretError",
    "NameCollisionError",
    "NoLedgerError",
    "OutcomeUnknownError",
    "PlanRefusedError",
    "PolicyError",
    "QuotaExceededError",
    "SandboxError",
    "SandboxUnavailableError",
    "ServerConnectionError",
    "ServerRefusedError",
    "ServerRejectedError",
    "ServerUnavailableError",
    "StubRenderError",
    "UnsafeURLError",
]


class CodemodeError(Exception):
    """Base class of every error codemode raises on purpose."""

    @property
    def summary(self) -> str:
        """What a program is told: the message, less anything only the host's logs and operators
        may see (see :class:`ServerConnectionError`)."""
        return str(self)


class ConfigError(CodemodeError):
    """The configuration (``codemode.toml``, an imported ``mcpServers`` file, a policy) is invalid.

    ``problems`` lists each problem as ``(location, message)``; ``str()`` renders all of them.
    """

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{source}: invalid configuration"]
        lines += [f"  - {loc}: {msg}" if loc else f"  - {msg}" for loc, msg in problems]
        super().__init__("\n".join(lines))


class MissingSecretError(CodemodeError, LookupError):
    """A ``${NAME}`` reference in the configuration names an environment variable that is not set."""

    def __init__(self, variable: str) -> None:
        self.variable = variable
        super().__init__(variable)


class ServerConnectionError(CodemodeError):
    """A configured MCP server could not be started, reached or used."""

    def __init__(self, server: str, target: str, reason: str, stderr_tail: str = "") -> None:
        self.server = server
        self.target = target
        self.reason = reason
        self.stderr_tail = stderr_tail
        self._summary = message = f"server {server!r} ({target}): {reason}"
        if stderr_tail:
            message += "\n  last stderr lines:\n" + "\n".join(
                f"    {line}" for line in stderr_tail.splitlines()
            )
        super().__init__(message)

    @property
    def summary(self) -> str:
        """The message without the server's stderr, which may quote anything the server handled
        (any tenant's data). The host's logs and operators get the tail."""
        return self._summary


class CatalogError(CodemodeError):
    """The tool catalog or the lock file is unusable (corrupt lock, unknown server or tool)."""


class NameCollisionError(CodemodeError):
    """Two different MCP names would map to the same Python identifier."""


class StubRenderError(CodemodeError):
    """A stub module could not be rendered safely (the renderer refuses rather than emit it)."""


class SandboxError(CodemodeError):
    """The sandbox could not be started, or failed outside the program's control."""


class SandboxUnavailableError(SandboxError):
    """The requested sandbox backend cannot run on this machine (for example no Docker engine)."""


class ChannelError(CodemodeError):
    """A message on a run's channel broke the protocol (bad frame, bad auth, too large, too deep)."""


class PolicyError(CodemodeError):
    """The policy is invalid, or a run was bound to a principal the policy does not know."""


class PlanRefusedError(PolicyError):
    """A run asked to follow a plan that cannot be used: unknown, not approved, expired, revoked,
    for another principal or tenant, or for other code. The message says which."""


class QuotaExceededError(PolicyError):
    """A principal or tenant has used up a quota of ``[policy.quotas]``: the run was refused
    before it started (nothing ran). ``quota`` says which quota, its limit and what was used;
    ``retry_after_s`` is when to try again (the window's end, or a guess for a free run slot)."""

    def __init__(self, message: str, *, quota: dict[str, Any], retry_after_s: float) -> None:
        self.quota = quota
        self.retry_after_s = retry_after_s
        super().__init__(message)


class LedgerError(CodemodeError):
    """The operation ledger cannot be opened, written or verified."""


class NoLedgerError(LedgerError):
    """No ledger exists where one was opened without ``create`` (a SQLite file, or a database
    without the ledger's tables): nothing was ever recorded there."""


class ServerUnavailableError(ServerConnectionError):
    """A request could not be sent because the server is not connected. Nothing reached it."""


class OutcomeUnknownError(CodemodeError):
    """A request was sent but no answer came (timeout, lost connection): it may or may not have
    taken effect. Such calls are never retried automatically; they are reconciled."""

    def __init__(self, server: str, tool: str, reason: str) -> None:
        self.server = server
        self.tool = tool
        self.reason = reason
        super().__init__(f"{server}/{tool}: outcome unknown - {reason}")


class ServerRefusedError(CodemodeError):
    """The server refused the request before executing it (HTTP 429/503, or its tool schema changed).

    Nothing happened on the server, so the call may be retried after ``retry_after`` seconds.
    """

    def __init__(self, server: str, tool: str, reason: str, retry_after: float | None = None) -> None:
        self.server = server
        self.tool = tool
        self.reason = reason
        self.retry_after = retry_after
        super().__init__(f"{server}/{tool}: refused before execution - {reason}")


class ServerRejectedError(CodemodeError):
    """The server rejected the request as invalid (a client error). Never retried."""

    def __init__(self, server: str, tool: str, code: int, message: str) -> None:
        self.server = server
        self.tool = tool
        self.code = code
        self.message = message
        super().__init__(f"{server}/{tool}: rejected by the server ({code}): {message}")


class UnsafeURLError(CodemodeError):
    """A URL codemode was about to fetch on its own names a host it must not reach: plain ``http``
    off loopback, or a loopback, private, link-local or metadata address that was not allowed.
    Nothing was sent."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"refused to fetch {url}: {reason}")


class AuthError(CodemodeError):
    """Signing in to a remote server failed, or its stored credentials cannot be used.

    Messages never carry a token, a code or a client secret."""


class AuthRequiredError(AuthError):
    """A remote server asks for a sign-in that has not happened (or has expired and cannot be
    refreshed). ``codemode auth login SERVER`` fixes it."""

    def __init__(self, server: str, detail: str = "") -> None:
        self.server = server
        hint = f"server {server!r} needs a sign-in: run `codemode auth login {server}`"
        super().__init__(f"{hint} ({detail})" if detail else hint)
