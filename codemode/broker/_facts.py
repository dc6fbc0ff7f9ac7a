"""What a call is, and what the gates have established about it so far.

A :class:`Call` is what was asked, fixed before the first gate runs. :class:`Facts` is what the
gates learned (the principal's rules, the pinned definition, the risk, the resources touched,
the approval, the cost). Gates never change either: each returns a decision carrying the facts
it adds, so a gate can only use what an earlier gate established, in the order the pipeline
runs them, and each gate can be tested alone on hand-built values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from codemode.broker._run import RunState
from codemode.calls import RunBinding, ToolCallRequest
from codemode.catalog import ToolSpec
from codemode.config import PrincipalPolicy, Risk

CallKind = Literal["tool", "resource", "prompt"]


@dataclass(frozen=True)
class Call:
    binding: RunBinding
    run: RunState
    server: str
    name: str
    """The tool's name, the resource's URI or the prompt's name."""
    arguments: Mapping[str, Any]
    """The arguments as they will be sent (PII placeholders already mapped back)."""
    now: float
    kind: CallKind = "tool"
    request: ToolCallRequest | None = None
    """The program's request, for tool calls (schema hash, sequence, idempotency key)."""

    @property
    def label(self) -> str:
        return f"{self.server}/{self.name}"

    @property
    def call_id(self) -> str:
        seq = self.request.seq if self.request is not None else 0
        return f"{self.binding.run_id}/{seq}"

    @property
    def as_passed(self) -> Mapping[str, Any]:
        """The arguments as the program passed them (placeholders not revealed): for approvers."""
        return self.request.arguments if self.request is not None else self.arguments


@dataclass(frozen=True)
class Facts:
    principal: PrincipalPolicy | None = None
    tool: ToolSpec | None = None
    """The live definition the server lists now."""
    pinned: Mapping[str, Any] | None = None
    """The approved definition from codemode.lock."""
    trusted: bool = False
    risk: Risk = "high"
    scope: tuple[str, ...] = ()
    """The concrete resources this call touches, for the execution record."""
    approval_id: str | None = None
    cost: float = 0.0

    def with_(self, **changes: Any) -> Facts:
        # Three times a call: a copy of the fields, not dataclasses.replace (which goes through
        # __init__ and costs 3-4 times as much). A name that is not a field is still an error.
        unknown = changes.keys() - _FACT_FIELDS
        if unknown:
            raise TypeError(f"Facts has no field(s) {sorted(unknown)}")
        new = object.__new__(Facts)
        new.__dict__.update(self.__dict__, **changes)
        return new


_FACT_FIELDS = frozenset(field.name for field in dataclasses.fields(Facts))
