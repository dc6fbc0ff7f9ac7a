"""codemode: let an AI agent use the tools of many MCP servers by writing code.

The public API is what ``__all__`` lists; everything in underscore modules is private.
"""

from codemode.config import Config, load_config
from codemode.errors import (
    CatalogError,
    ChannelError,
    CodemodeError,
    ConfigError,
    LedgerError,
    NameCollisionError,
    OutcomeUnknownError,
    PolicyError,
    SandboxError,
    SandboxUnavailableError,
    ServerConnectionError,
    ServerUnavailableError,
    StubRenderError,
)
from codemode.host import McpHost, ServerStatus

__all__ = [
    "CatalogError",
    "ChannelError",
    "CodemodeError",
    "Config",
    "ConfigError",
    "LedgerError",
    "McpHost",
    "NameCollisionError",
    "OutcomeUnknownError",
    "PolicyError",
    "SandboxError",
    "SandboxUnavailableError",
    "ServerConnectionError",
    "ServerStatus",
    "ServerUnavailableError",
    "StubRenderError",
    "load_config",
]
