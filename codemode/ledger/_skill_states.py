"""The moves of a skill version: proposed -> approved -> revoked, or proposed -> revoked.

One table, read by the reducer, so an illegal move is refused before it is written and again
when ``verify`` replays the log. A version's content (source, digest, pins) is fixed when it is
proposed: a changed skill is a new version, never an edited one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

SKILL_STATUSES: Final = ("proposed", "approved", "revoked")

SKILL_EVENTS: Final[dict[str, tuple[frozenset[str | None], str]]] = {
    # event kind -> (statuses it may start from, None meaning "no row yet"; the status it sets)
    "skill_proposed": (frozenset({None}), "proposed"),
    "skill_approved": (frozenset({"proposed"}), "approved"),
    "skill_revoked": (frozenset({"proposed", "approved"}), "revoked"),
}

# What no event after the proposal may change.
_FIXED: Final = ("tenant", "name", "version", "description", "source", "digest", "pin", "deps_json")
# What each later move must record.
_REQUIRED: Final = {
    "skill_approved": ("approved_by", "approved_at"),
    "skill_revoked": ("revoked_by", "revoked_at"),
}


def skill_event_problem(
    kind: str, current: Mapping[str, Any] | None, fields: Mapping[str, Any], new: Mapping[str, Any]
) -> str | None:
    """Why ``kind`` cannot move the skill version from ``current`` to ``new``; None if it can."""
    sources, target = SKILL_EVENTS[kind]
    status = None if current is None else current["status"]
    if status not in sources:
        return f"{kind}: the skill version is {status or 'not recorded'}"
    if new["status"] != target:
        return f"{kind} must set status {target}"
    if current is not None and any(name in fields for name in _FIXED):
        return f"{kind} must not change a skill version's content (propose a new version)"
    missing = [name for name in _REQUIRED.get(kind, ()) if new[name] is None]
    if missing:
        return f"{kind} must record {', '.join(missing)}"
    return None
