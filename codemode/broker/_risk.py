"""How risky a call is, from the policy and (only if the server is trusted) its annotations.

===============================================  =======
Rule (first that applies)                        Risk
===============================================  =======
policy ``consent.read_only`` names the tool      low
``destructiveHint: true`` (any server)           high
server not ``trusted``                           high
trusted, ``readOnlyHint: true``                  low
trusted, ``destructiveHint: false``              medium
anything else                                    high
===============================================  =======
"""

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
    read_only = hints.get("readOnlyHint") is True
    destructive = hints.get("destructiveHint")
    if destructive is True or not trusted:
        # destructiveHint only ever raises risk; an untrusted server's hints never lower it, and
        # "read-only but destructive" is a contradiction that gets the worse reading.
        return "high"
    if read_only:
        return "low"
    if destructive is False:
        return "medium"  # a trusted server says it writes, but only additively
    return "high"


def access_for(risk: Risk) -> str:
    """What a call does to a resource: only low-risk tools read; everything else may write."""
    return "read" if risk == "low" else "write"
