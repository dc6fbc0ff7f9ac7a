"""How risky a call is, from the policy and (only if the server is trusted) its annotations."""

from __future__ import annotations

from typing import Any

from codemode.broker._selectors import any_match
from codemode.config import PolicyConfig, Risk


def tool_risk(
    policy: PolicyConfig, server: str, tool: str, annotations: dict[str, Any] | None, *, trusted: bool
) -> Risk:
    """``low`` / ``medium`` / ``high``; see :mod:`codemode.config._policy` for the rules.

    ``annotations`` must be the *pinned* ones: a server cannot lower a tool's risk by changing
    its hints after approval (the hash covers annotations, so the change would block it anyway).
    """
    if any_match(policy.consent.read_only, server, tool):
        return "low"
    hints = annotations or {}
    if hints.get("destructiveHint") is True and hints.get("readOnlyHint") is not True:
        return "high"
    if hints.get("readOnlyHint") is True:
        return "low" if trusted else "medium"
    return "high"


def access_for(risk: Risk) -> str:
    """What a call does to a resource: read-risk tools read; everything else may write."""
    return "write" if risk == "high" else "read"
