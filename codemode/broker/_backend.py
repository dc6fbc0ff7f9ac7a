"""The broker's seam to the servers: what it needs from whoever sends MCP requests.

The MCP host implements it (through ``codemode._adapters``); ``codemode.testing`` has tools in
memory that do too.
"""

from __future__ import annotations

from typing import Any, Protocol

import mcp_types

from codemode.broker._call_inputs import CallInputs
from codemode.calls import ProgressListener


class ToolBackend(Protocol):
    """Sends requests to servers (the MCP host implements it)."""

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        meta: dict[str, Any] | None = None,
        inputs: CallInputs | None = None,
        time_limit_s: float | None = None,
        on_progress: ProgressListener | None = None,
    ) -> mcp_types.CallToolResult:
        """``time_limit_s`` bounds a long-running (task) call; others keep the server's timeout."""
        ...

    def long_running(self, server: str, tool: str) -> bool:
        """Whether the tool's calls run as tasks (followed until done, possibly for long)."""
        ...

    async def read_resource(self, server: str, uri: str) -> mcp_types.ReadResourceResult: ...

    async def get_prompt(
        self, server: str, name: str, arguments: dict[str, str]
    ) -> mcp_types.GetPromptResult: ...
