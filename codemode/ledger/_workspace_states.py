"""The moves of a workspace's row: created, committed again and again, used, removed (and
committed again, which brings it back).

One table, read by the reducer, so an illegal move is refused before it is written and again
when ``verify`` replays the log. Whose workspace it is (tenant, principal, session) is fixed
when the row is created: the row's key is a digest of exactly those.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

WORKSPACE_EVENTS: Final[dict[str, frozenset[str | None]]] = {
    # event kind -> the states it may start from ("live", "removed"; None: no row yet)
    "workspace_created": frozenset({None}),
    "workspace_committed": frozenset({"live", "removed"}),
    "workspace_used": frozenset({"live"}),
    "workspace_removed": frozenset({"live"}),
}

_IDENTITY: Final = ("tenant", "principal", "session_id")


def _state(row: Mapping[str, Any] | None) -> str | None:
    if row is None:
        return None
    return "live" if row["removed_at"] is None else "removed"


def workspace_event_problem(
    kind: str, current: Mapping[str, Any] | None, fields: Mapping[str, Any], new: Mapping[str, Any]
) -> str | None:
    """Why ``kind`` cannot move the workspace's row from ``current`` to ``new``; None if it can."""
    state = _state(current)
    if state not in WORKSPACE_EVENTS[kind]:
        return f"{kind}: the workspace is {state or 'not recorded'}"
    if current is not None and any(name in fields for name in _IDENTITY):
        return f"{kind} must not change whose workspace it is"
    if kind == "workspace_used" and set(fields) != {"last_used"}:
        return "workspace_used records only when it was used"
    if kind == "workspace_committed" and state == "live" and "created_at" in fields:
        return "workspace_committed must not change when a live workspace was created"
    if kind in ("workspace_created", "workspace_committed") and (
        new["version"] is None or new["removed_at"] is not None
    ):
        return f"{kind} records the live version and clears removed_at"
    if kind == "workspace_removed" and (new["removed_at"] is None or new["version"] is not None):
        return "workspace_removed records when, and leaves no live version"
    if int(new["files"]) < 0 or int(new["bytes"]) < 0:
        return f"{kind}: files and bytes are counts, never negative"
    return None
