"""Workspaces written before their metadata moved into the ledger: read once, then forgotten.

Such a folder holds ``meta.json`` (tenant, principal, session, last use) and ``current``, a link
naming its live ``v-<token>`` folder. The store records both in its index the first time it
meets the folder and then removes them, so the index is the only place that says whose a folder
is and which version is live. Nothing here follows a link: ``current`` is read as a name.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LegacyWorkspace", "forget_legacy", "read_legacy"]

_META = "meta.json"
_CURRENT = "current"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass(frozen=True)
class LegacyWorkspace:
    tenant: str
    principal: str
    session: str | None
    last_used: float
    """Seconds since the epoch."""
    version: str
    """The ``v-<token>`` folder ``current`` named."""


def read_legacy(folder: Path) -> LegacyWorkspace | None:
    """What ``folder``'s ``meta.json`` and ``current`` say; None when either is missing or unreadable
    (the folder is then not a workspace of an earlier codemode, and is left as it is)."""
    try:
        fd = os.open(folder / _META, os.O_RDONLY | _NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as handle:
            raw = json.load(handle)
        version = os.readlink(folder / _CURRENT)
        session = raw.get("session")
        found = LegacyWorkspace(
            tenant=str(raw["tenant"]),
            principal=str(raw["principal"]),
            session=None if session is None else str(session),
            last_used=float(raw["last_used"]),
            version=version,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not version.startswith("v-") or "/" in version:
        return None
    return found


def forget_legacy(folder: Path) -> None:
    """Remove ``meta.json`` and ``current`` once the index holds what they said."""
    for name in (_META, _CURRENT):
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
