"""The observable state of one configured server connection."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from codemode._text import escape_invisible


class ConnectionState(StrEnum):
    CONNECTING = "connecting"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"
    DISABLED = "disabled"


class ServerStatus(BaseModel):
    """What codemode knows about one server. ``name`` is the identity (from the config).

    ``server_info`` is what the server says about itself: kept for display and audit, never
    used as identity.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    transport: str
    target: str
    """The command line or URL, as configured (``${VAR}`` references unresolved)."""
    state: ConnectionState
    protocol_version: str | None = None
    era: str | None = None
    """``handshake`` (initialize, up to 2025-11-25) or ``stateless`` (2026-07-28)."""
    sdk_version: str
    """Version of the MCP SDK codemode used for this connection."""
    server_info: dict[str, Any] | None = None
    capabilities: dict[str, Any] | None = None
    tool_count: int = 0
    excluded_count: int = 0
    error: str | None = None
    stderr_tail: str = ""
    reconnects: int = 0
    """Connection attempts after the first: each one follows a lost or failed connection."""

    def failure(self) -> str | None:
        """Why this server cannot be used, in one line; None when it can (or is disabled).

        The host's reason says what went wrong in terms of the configuration; a server that
        exits at start says why on its stderr, so its telling line is added: the last line
        that names an error (a Python or Node exception: ``ModuleNotFoundError: ...``,
        ``Error: Cannot find module ...``), else its last line. Both are partly the server's
        words: on one line, with control and invisible characters shown as escapes, so it
        prints safely on a terminal or in a log.
        """
        if self.state in (ConnectionState.READY, ConnectionState.DISABLED) or self.error is None:
            return None
        said = telling_line(self.stderr_tail)
        text = f"{self.error}; on stderr it said: {said}" if said else self.error
        return escape_invisible(" ".join(text.split()))


_ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception)\b:")
MAX_TOLD = 300
"""Characters of a server's stderr line quoted in a one-line reason."""


def telling_line(tail: str) -> str:
    """The line of a server's stderr that best says why it stopped (see :meth:`ServerStatus.failure`)."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    found = next((line for line in reversed(lines) if _ERROR_LINE.search(line)), lines[-1])
    return found if len(found) <= MAX_TOLD else found[:MAX_TOLD] + "…"
