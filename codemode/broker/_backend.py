"""The broker's seam to the servers: what it needs from whoever sends MCP requests.

The MCP host implements it as it stands (``codemode.host.McpHost``); ``codemode.testing`` has
tools in memory that do too.
"""

from __future__ import annotations

from typing import Any, Protocol

import mcp_types

from codemode.calls import SendOptions


class ToolBackend(Protocol):
    """Sends requests to servers (the MCP host implements it)."""

    async def call_tool(
        self, server: str, tool: str, arguments: dict[str, Any], options: SendOptions
    ) -> mcp_types.CallToolResult: ...

    def long_running(self, server: str, tool: str) -> bool:
        """Whether the tool's calls run as tasks (followed until done, possibly for long); False
        for a server it does not know (the call itself says so)."""
        ...

    async def read_resource(self, server: str, uri: str) -> mcp_types.ReadResourceResult: ...

    async def get_prompt(
        self, server: str, name: str, arguments: dict[str, str]
    ) -> mcp_types.GetPromptResult: ...
