"""How risky a call is, from the policy and the tool's own hints, where someone vouched for them.

=================================================================  =====================
Rule (first that applies)                                          Risk
=================================================================  =====================
policy ``consent.read_only`` names the tool                        low
server ``trusted``                                                 what its hints give
hints accepted at review (``codemode pin --accept-hints``)         what its hints give
anything else (the hints of an untrusted server are unchecked)     high
=================================================================  =====================

What hints give is :func:`codemode.catalog.claimed_risk`: ``destructiveHint: true`` high,
``readOnlyHint: true`` low, ``destructiveHint: false`` medium, anything else high.
"""

from __future__ import annotations

from typing import Any

from codemode.broker._selectors import any_match
from codemode.catalog import claimed_risk
from codemode.config import RISK_ORDER, PolicyConfig, Risk


def tool_risk(
    policy: PolicyConfig,
    server: str,
    tool: str,
    annotations: dict[str, Any] | None,
    *,
    trusted: bool,
    accepted: Risk | None = None,
) -> Risk:
    """``low`` / ``medium`` / ``high``; see the module for the rules.

    ``annotations`` must be the *pinned* ones, and ``accepted`` the pin's accepted risk
    (``PinnedDefinition.accepted_risk``): a server cannot lower a tool's risk by changing its
    hints after approval (the hash covers annotations, so the change would block it anyway, and
    a definition approved anew holds no accepted hints).
    """
    if any_match(policy.consent.read_only, server, tool):
        return "low"
    claimed = claimed_risk(annotations)
    if trusted:
        return claimed
    if accepted is None:
        return "high"
    # Never below what the hints claim: the lock file's check keeps the two equal, and this
    # holds even without it ("destructiveHint: true" stays high whatever was accepted).
    return accepted if RISK_ORDER[accepted] >= RISK_ORDER[claimed] else claimed


def access_for(risk: Risk) -> str:
    """What a call does to a resource: only low-risk tools read; everything else may write."""
    return "read" if risk == "low" else "write"
