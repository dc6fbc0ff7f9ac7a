"""What a gate says about a call: allow (with what it learned), deny with a reason, or ask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from codemode.broker._facts import Call, Facts


@dataclass(frozen=True, slots=True)
class Allow:
    facts: Facts
    """The facts so far, plus what this gate established."""
    note: str = ""


@dataclass(frozen=True, slots=True)
class Deny:
    gate: str
    reason: str


@dataclass(frozen=True, slots=True)
class NeedsApproval:
    """The call may go ahead only if a person approves it (the broker asks; gates never do)."""

    gate: str
    why: str
    facts: Facts


Decision = Allow | Deny | NeedsApproval


class Gate(Protocol):
    """One check. Pure with respect to the call: it returns what it learned instead of storing it."""

    name: str

    async def check(self, call: Call, facts: Facts) -> Decision: ...
