"""Readable reasons for why a server connection failed.

Failures arrive as whatever the transport raised, often wrapped in exception groups by the
SDK's task groups. We dig out the root cause and say it in terms of the configuration the user
wrote (the command, the URL, the timeout), because that is what they can change.
"""

from __future__ import annotations

import errno

import mcp_types
from mcp.shared.exceptions import MCPError

from codemode._redaction import redact_secrets
from codemode.config import HttpServerConfig, StdioServerConfig
from codemode.errors import (
    CodemodeError,
    OutcomeUnknownError,
    ServerConnectionError,
    ServerRefusedError,
    ServerRejectedError,
)
from codemode.host._http import refusal_reason

REJECTED_BEFORE_RUNNING = frozenset(
    {
        mcp_types.INVALID_PARAMS,
        mcp_types.METHOD_NOT_FOUND,
        mcp_types.INVALID_REQUEST,
        mcp_types.PARSE_ERROR,
        mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
    }
)
"""JSON-RPC errors that mean the request was rejected before anything ran (invalid, or it needs
a client capability the host does not declare, such as elicitation with ``elicitation = "deny"``)."""


def root_cause(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups, following explicit causes of wrappers."""
    current: BaseException = exc
    while True:
        inner: tuple[BaseException, ...] = getattr(current, "exceptions", ())
        if not inner:
            return current
        current = inner[0]


MAX_ERROR_CHARS = 1000


def describe_exception(exc: BaseException, config: StdioServerConfig | HttpServerConfig) -> str:
    """One line for a server's status. Servers write part of it (an OAuth error body, a crash
    message), so secrets are hidden and its length capped: a token never reaches a status."""
    text, _ = redact_secrets(_describe(exc, config))
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"


def _describe(exc: BaseException, config: StdioServerConfig | HttpServerConfig) -> str:
    exc = root_cause(exc)
    if isinstance(exc, ServerConnectionError):
        return exc.reason
    if isinstance(exc, CodemodeError):
        return str(exc)
    if isinstance(config, StdioServerConfig) and isinstance(exc, OSError):
        if config.cwd is not None and exc.filename == config.cwd:
            return f"working directory {config.cwd!r} does not exist or is not a directory"
        if isinstance(exc, FileNotFoundError):
            return f"command {config.command!r} was not found; is it installed and on PATH?"
        if isinstance(exc, PermissionError):
            return f"command {config.command!r} is not executable (permission denied)"
    if isinstance(exc, TimeoutError):
        return str(exc) or f"no answer within connect_timeout = {config.connect_timeout:g} s"
    if isinstance(exc, MCPError):
        if isinstance(config, StdioServerConfig) and "closed" in str(exc).lower():
            return f"the server process exited or closed its output ({exc})"
        return f"the server answered with an error: {exc}"
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
        return "connection refused: is the server running and listening on that address?"
    name = type(exc).__name__
    if isinstance(config, HttpServerConfig) and (
        "Connect" in name or "Network" in name or "Transport" in name
    ):
        detail = str(exc) or name
        return f"could not reach {config.url}: {detail}"
    return f"{name}: {exc}" if str(exc) else name


def call_failure(
    server: str,
    config: StdioServerConfig | HttpServerConfig,
    tool: str,
    exc: MCPError,
    refusal: tuple[int, float | None] | None,
    *,
    closed: bool,
    timed_out: bool,
) -> Exception:
    """What a call that ended in ``exc`` means for its outcome: refused or rejected (it did not
    run), or unknown (it may have run). ``refusal`` is the HTTP status (and Retry-After) the
    server answered the call with, ``closed`` whether the transport ended, ``timed_out`` whether
    call_timeout passed."""
    if refusal is not None:
        status, retry_after = refusal
        return ServerRefusedError(server, tool, refusal_reason(server, config, status), retry_after)
    if exc.code == mcp_types.HEADER_MISMATCH:
        return ServerRefusedError(server, tool, "the server's definition of the tool changed")
    if closed:
        return OutcomeUnknownError(server, tool, f"connection lost during the call: {exc}")
    if timed_out:
        return OutcomeUnknownError(server, tool, f"no answer within call_timeout = {config.call_timeout:g} s")
    if exc.code in REJECTED_BEFORE_RUNNING:
        return ServerRejectedError(server, tool, exc.code, str(exc))
    # An internal error may have happened half-way through executing the tool.
    return OutcomeUnknownError(server, tool, f"server error {exc.code}: {exc}; it may have executed")
