"""What a gate says about a call: allow, deny with a reason, or needs approval."""

from __future__ import annotations

from dataclasses import dataclass

from codemode.config import Risk


@dataclass(frozen=True, slots=True)
class Allow:
    note: str = ""


@dataclass(frozen=True, slots=True)
class Deny:
    gate: str
    reason: str


@dataclass(frozen=True, slots=True)
class NeedsApproval:
    risk: Risk
    why: str


Decision = Allow | Deny | NeedsApproval
