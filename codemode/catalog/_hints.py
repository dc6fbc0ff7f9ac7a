"""What a tool's own annotations claim about its risk.

A server sets ``readOnlyHint``, ``destructiveHint`` and the rest itself: they are claims that
nobody checked. codemode reads them only where a person vouched for them, for a whole server
(``trusted = true``) or for one tool at review (``codemode pin --accept-hints``, which stores the
class read here with the approved definition, so a changed definition loses it).

=====================================================  =======
Hints (first that applies)                             Risk
=====================================================  =======
``destructiveHint: true``                              high
``readOnlyHint: true``                                 low
``destructiveHint: false``                             medium
anything else (no hints, ``readOnlyHint: false`` …)    high
=====================================================  =======

"Read-only but destructive" is a contradiction, and gets the worse reading.
"""

from __future__ import annotations

from typing import Any, Literal, cast

ClaimedRisk = Literal["low", "medium", "high"]
AcceptedRisk = Literal["low", "medium"]
"""What accepting a tool's hints can store: accepting a ``high`` claim would change nothing."""


def claimed_risk(annotations: Any) -> ClaimedRisk:
    """The risk the hints in ``annotations`` give if they are believed (see the module's table)."""
    hints = cast(dict[str, Any], annotations) if isinstance(annotations, dict) else {}
    destructive = hints.get("destructiveHint")
    if destructive is True:
        return "high"
    if hints.get("readOnlyHint") is True:
        return "low"
    if destructive is False:
        return "medium"  # it says it writes, but only additively
    return "high"
