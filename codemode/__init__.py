"""codemode: let an AI agent use the tools of many MCP servers by writing code.

The model gets one tool, ``run_code``. Its programs import typed stubs of the tools they need
and run in a sandbox; every call passes a broker that checks identity, pins, arguments, scope,
consent and budgets, records it in a ledger and filters its result.

    from codemode import CodeMode

    async with CodeMode.from_file("codemode.toml") as cm:
        tool = cm.tool_definition("anthropic")           # give this to the model
        reply = await cm.handle_tool_call("run_code", {"code": "..."})
        print(reply.text)

The public API is what ``__all__`` lists; modules starting with ``_`` are private.
"""

from codemode._engine import CodeMode, RunErrorInfo, RunResult
from codemode._tools import ToolFormat, ToolReply
from codemode.broker import ApprovalAnswer, ApprovalRequest, Approver, CallbackApprover, TerminalApprover
from codemode.config import Config, config_from_mapping, load_config
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
    ServerRefusedError,
    ServerRejectedError,
    ServerUnavailableError,
    StubRenderError,
)
from codemode.host import ServerStatus
from codemode.stubs import SearchResult, VirtualTree

__all__ = [
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "CallbackApprover",
    "CatalogError",
    "ChannelError",
    "CodeMode",
    "CodemodeError",
    "Config",
    "ConfigError",
    "LedgerError",
    "NameCollisionError",
    "OutcomeUnknownError",
    "PolicyError",
    "RunErrorInfo",
    "RunResult",
    "SandboxError",
    "SandboxUnavailableError",
    "SearchResult",
    "ServerConnectionError",
    "ServerRefusedError",
    "ServerRejectedError",
    "ServerStatus",
    "ServerUnavailableError",
    "StubRenderError",
    "TerminalApprover",
    "ToolFormat",
    "ToolReply",
    "VirtualTree",
    "config_from_mapping",
    "load_config",
]
