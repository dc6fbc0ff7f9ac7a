"""codemode: let an AI agent use the tools of many MCP servers by writing code.

The model gets one tool, ``run_code``. Its programs import typed stubs of the tools they need
and run in a sandbox; every call passes a broker that checks identity, pins, arguments, scope,
consent and budgets, records it in a ledger and filters its result.

    from codemode import CodeMode as CodeMode

    async with CodeMode.from_file("codemode.toml") as cm:
        tool = cm.tool_definition("anthropic")           # give this to the model
        reply = await cm.handle_tool_call("run_code", {"code": "..."})
        print(reply.text)

The public API is what ``__all__`` lists; modules starting with ``_`` are private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

_EXPORTS = {
    "ApprovalAnswer": "codemode.broker",
    "ApprovalRequest": "codemode.broker",
    "AuthError": "codemode.errors",
    "AuthRequiredError": "codemode.errors",
    "Approver": "codemode.broker",
    "BatchOptions": "codemode.batch",
    "CallbackApprover": "codemode.broker",
    "CallbackElicitor": "codemode.broker",
    "CallbackSampler": "codemode.broker",
    "CallProgress": "codemode.calls",
    "CatalogError": "codemode.errors",
    "ChannelError": "codemode.errors",
    "CodeMode": "codemode._api",
    "CodemodeError": "codemode.errors",
    "Config": "codemode.config",
    "ConfigError": "codemode.errors",
    "ElicitationAnswer": "codemode.broker",
    "ElicitationRequest": "codemode.broker",
    "Elicitor": "codemode.broker",
    "ItemResult": "codemode.batch",
    "LedgerError": "codemode.errors",
    "MissingSecretError": "codemode.errors",
    "NameCollisionError": "codemode.errors",
    "OutcomeUnknownError": "codemode.errors",
    "Plan": "codemode.engine",
    "PlanRefusedError": "codemode.errors",
    "PolicyError": "codemode.errors",
    "RunErrorInfo": "codemode.engine",
    "RunLimits": "codemode.broker",
    "RunResult": "codemode.engine",
    "RunUsage": "codemode.engine",
    "Sampler": "codemode.broker",
    "SamplingAnswer": "codemode.broker",
    "SamplingRequest": "codemode.broker",
    "SandboxError": "codemode.errors",
    "SandboxUnavailableError": "codemode.errors",
    "SearchResult": "codemode.stubs",
    "ServerConnectionError": "codemode.errors",
    "ServerRefusedError": "codemode.errors",
    "ServerRejectedError": "codemode.errors",
    "ServerStatus": "codemode.host",
    "ServerUnavailableError": "codemode.errors",
    "StubRenderError": "codemode.errors",
    "TerminalApprover": "codemode.broker",
    "TerminalElicitor": "codemode.broker",
    "ToolFormat": "codemode.engine",
    "ToolReply": "codemode.engine",
    "UnsafeURLError": "codemode.errors",
    "VirtualTree": "codemode.stubs",
    "config_from_mapping": "codemode.config",
    "load_config": "codemode.config",
}
"""Every public name and the module it lives in (imported on first use: see codemode._lazy)."""

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time names load lazily
    from codemode._api import CodeMode as CodeMode
    from codemode.batch import BatchOptions as BatchOptions
    from codemode.batch import ItemResult as ItemResult
    from codemode.broker import ApprovalAnswer as ApprovalAnswer
    from codemode.broker import ApprovalRequest as ApprovalRequest
    from codemode.broker import Approver as Approver
    from codemode.broker import CallbackApprover as CallbackApprover
    from codemode.broker import CallbackElicitor as CallbackElicitor
    from codemode.broker import CallbackSampler as CallbackSampler
    from codemode.broker import ElicitationAnswer as ElicitationAnswer
    from codemode.broker import ElicitationRequest as ElicitationRequest
    from codemode.broker import Elicitor as Elicitor
    from codemode.broker import RunLimits as RunLimits
    from codemode.broker import Sampler as Sampler
    from codemode.broker import SamplingAnswer as SamplingAnswer
    from codemode.broker import SamplingRequest as SamplingRequest
    from codemode.broker import TerminalApprover as TerminalApprover
    from codemode.broker import TerminalElicitor as TerminalElicitor
    from codemode.calls import CallProgress as CallProgress
    from codemode.config import Config as Config
    from codemode.config import config_from_mapping as config_from_mapping
    from codemode.config import load_config as load_config
    from codemode.engine import Plan as Plan
    from codemode.engine import RunErrorInfo as RunErrorInfo
    from codemode.engine import RunResult as RunResult
    from codemode.engine import RunUsage as RunUsage
    from codemode.engine import ToolFormat as ToolFormat
    from codemode.engine import ToolReply as ToolReply
    from codemode.errors import AuthError as AuthError
    from codemode.errors import AuthRequiredError as AuthRequiredError
    from codemode.errors import CatalogError as CatalogError
    from codemode.errors import ChannelError as ChannelError
    from codemode.errors import CodemodeError as CodemodeError
    from codemode.errors import ConfigError as ConfigError
    from codemode.errors import LedgerError as LedgerError
    from codemode.errors import MissingSecretError as MissingSecretError
    from codemode.errors import NameCollisionError as NameCollisionError
    from codemode.errors import OutcomeUnknownError as OutcomeUnknownError
    from codemode.errors import PlanRefusedError as PlanRefusedError
    from codemode.errors import PolicyError as PolicyError
    from codemode.errors import SandboxError as SandboxError
    from codemode.errors import SandboxUnavailableError as SandboxUnavailableError
    from codemode.errors import ServerConnectionError as ServerConnectionError
    from codemode.errors import ServerRefusedError as ServerRefusedError
    from codemode.errors import ServerRejectedError as ServerRejectedError
    from codemode.errors import ServerUnavailableError as ServerUnavailableError
    from codemode.errors import StubRenderError as StubRenderError
    from codemode.errors import UnsafeURLError as UnsafeURLError
    from codemode.host import ServerStatus as ServerStatus
    from codemode.stubs import SearchResult as SearchResult
    from codemode.stubs import VirtualTree as VirtualTree
