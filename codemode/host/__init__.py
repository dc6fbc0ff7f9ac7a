"""The MCP host: connections to every configured server, their status and live catalogs."""

from codemode.host._connection import SDK_VERSION, ServerConnection, TransportFactory
from codemode.host._host import McpHost
from codemode.host._http import network_policy
from codemode.host._inputs import InputHandler, RootsUpdate
from codemode.host._status import ConnectionState, ServerStatus

__all__ = [
    "SDK_VERSION",
    "ConnectionState",
    "InputHandler",
    "McpHost",
    "RootsUpdate",
    "ServerConnection",
    "ServerStatus",
    "TransportFactory",
    "network_policy",
]
