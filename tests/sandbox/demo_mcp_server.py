"""A tiny MCP server for the sandbox tests, run over stdio: ``python demo_mcp_server.py``."""

from __future__ import annotations

import base64

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

server = MCPServer("demo")

# A 1x1 transparent PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


class Sum(BaseModel):
    total: int


class Item(BaseModel):
    id: int
    name: str


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two integers."""
    return Sum(total=a + b)


@server.tool()
def lookup(id: int) -> Item:
    """Look up one item."""
    return Item(id=id, name=f"item-{id}")


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Echo text back (unstructured text content)."""
    return text


@server.tool()
def fail(msg: str) -> str:
    """Always fails with ``msg``."""
    raise ToolError(msg)


@server.tool(structured_output=False)
def pixel() -> Image:
    """A 1x1 PNG."""
    return Image(data=PIXEL, format="png")


if __name__ == "__main__":
    server.run("stdio")
