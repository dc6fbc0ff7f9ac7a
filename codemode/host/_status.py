"""The observable state of one configured server connection."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict


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
