"""The state one call carries through the gates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codemode.broker._run import RunState
from codemode.calls import RunBinding, ToolCallRequest
from codemode.catalog import ToolSpec
from codemode.config import PrincipalPolicy, Risk


@dataclass
class CallContext:
    binding: RunBinding
    request: ToolCallRequest
    run: RunState
    arguments: dict[str, Any]
    """The arguments as they will be sent (PII placeholders already mapped back)."""
    now: float
    principal: PrincipalPolicy | None = None
    tool: ToolSpec | None = None
    """The live definition the server lists now."""
    pinned: dict[str, Any] | None = None
    """The approved definition from codemode.lock."""
    trusted: bool = False
    risk: Risk = "high"
    scope: list[str] = field(default_factory=lambda: [])
    """The concrete resources this call touches, for the execution record."""
    approval_id: str | None = None
    cost: float = 0.0

    @property
    def call_id(self) -> str:
        return f"{self.binding.run_id}/{self.request.seq}"

    @property
    def label(self) -> str:
        return f"{self.request.server}/{self.request.tool}"
