"""What the workspace store needs to keep its metadata: the seam to the ledger's table.

Files live in a directory; who each workspace belongs to, which version of its folder is live,
its size and when it was last used live in one shared table, so every replica and Ray worker
lists, ages and prunes the same workspaces. The ledger (a unit of the same layer, which this one
never imports) provides it: ``codemode.ledger.WorkspaceBook`` satisfies :class:`WorkspaceIndex`
structurally, and the engine and the CLI hand it to the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

__all__ = ["WorkspaceEntry", "WorkspaceIndex"]


class WorkspaceEntry(Protocol):
    """One live workspace as the index holds it."""

    @property
    def workspace_id(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def principal(self) -> str: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def version(self) -> str | None: ...
    @property
    def files(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def last_used(self) -> datetime: ...


class WorkspaceIndex(Protocol):
    """Where workspaces' metadata is kept; each method is one transaction of its own."""

    def find(self, workspace_id: str) -> WorkspaceEntry | None:
        """The live workspace ``workspace_id``, or None."""
        ...

    def listed(self, *, tenant: str | None = None, principal: str | None = None) -> Sequence[WorkspaceEntry]:
        """Every live workspace (of ``tenant`` and/or ``principal``), least recently used first."""
        ...

    def committed(
        self,
        workspace_id: str,
        *,
        tenant: str,
        principal: str,
        session_id: str | None,
        version: str,
        files: int,
        bytes: int,
        at: datetime,
    ) -> WorkspaceEntry:
        """Record ``version`` as the live files (creating or reviving the row), used ``at``."""
        ...

    def used(self, workspace_id: str, at: datetime) -> bool:
        """Mark it used ``at``; False when it is not live."""
        ...

    def removed(
        self, workspace_id: str, *, at: datetime, unused_before: datetime | None = None
    ) -> WorkspaceEntry | None:
        """Record it removed; None when it was not live or (``unused_before``) was used since."""
        ...
