"""Workspaces' metadata in the ledger's database: whose each one is, its live version, its size,
and when it was made and last used.

The files stay in a directory (``[workspace] root``); this table says which folder is live, so
every replica and Ray worker that shares the ledger lists, ages and prunes the same workspaces.
Every change is an event (``workspace_created``, ``workspace_committed``, ``workspace_used``,
``workspace_removed``) whose payload is the columns it writes, so ``verify`` checks the table like
every other. :class:`codemode.workspace.WorkspaceStore` uses a :class:`WorkspaceBook` through its
``WorkspaceIndex`` Protocol: the ledger knows nothing of folders, only of the values it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from codemode.ledger._context import LedgerContext
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._events import emit
from codemode.ledger._records import opt_time
from codemode.ledger._reduce import Row
from codemode.ledger._time import from_text, to_text

__all__ = ["WorkspaceBook", "WorkspaceRecord"]


@dataclass(frozen=True)
class WorkspaceRecord:
    """One workspace as the ledger holds it."""

    workspace_id: str
    """The digest of tenant, principal and session that names its folder."""
    tenant: str
    principal: str
    session_id: str | None
    version: str | None
    """The folder of its live files (None once removed)."""
    files: int
    bytes: int
    created_at: datetime
    last_used: datetime
    removed_at: datetime | None


def _record(row: Row) -> WorkspaceRecord:
    return WorkspaceRecord(
        workspace_id=str(row["workspace_id"]),
        tenant=str(row["tenant"]),
        principal=str(row["principal"]),
        session_id=cast("str | None", row["session_id"]),
        version=cast("str | None", row["version"]),
        files=int(cast("int", row["files"])),
        bytes=int(cast("int", row["bytes"])),
        created_at=from_text(str(row["created_at"])),
        last_used=from_text(str(row["last_used"])),
        removed_at=opt_time(row["removed_at"]),
    )


def _live(row: Row | None) -> bool:
    return row is not None and row["removed_at"] is None


class WorkspaceBook:
    """The workspaces of every tenant in one ledger. Obtained from ``StoreLedger.workspaces``."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    # -- reading ----------------------------------------------------------------------------------

    def find(self, workspace_id: str) -> WorkspaceRecord | None:
        """The live workspace ``workspace_id``; None when there is none (never, or removed)."""
        with self._ctx.read() as tx:
            row = tx.row("workspaces", workspace_id)
        return _record(row) if row is not None and _live(row) else None

    def listed(self, *, tenant: str | None = None, principal: str | None = None) -> list[WorkspaceRecord]:
        """Every live workspace (of ``tenant`` and/or ``principal``), least recently used first."""
        # One row per workspace, a few per principal: a scan keeps the store Protocol unchanged.
        with self._ctx.read() as tx:
            rows = [
                row
                for row in tx.rows("workspaces")
                if _live(row)
                and (tenant is None or row["tenant"] == tenant)
                and (principal is None or row["principal"] == principal)
            ]
        return sorted((_record(r) for r in rows), key=lambda r: (r.last_used, r.workspace_id))

    # -- writing ----------------------------------------------------------------------------------

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
    ) -> WorkspaceRecord:
        """Record ``version`` as the workspace's live files (creating its row, or bringing back a
        removed one), used ``at``."""
        when = to_text(at)
        state: dict[str, str | int | None] = {
            "version": version,
            "files": files,
            "bytes": bytes,
            "last_used": when,
        }
        with self._ctx.write() as tx:
            row = tx.row("workspaces", workspace_id)
            if row is None:
                identity = {"tenant": tenant, "principal": principal, "session_id": session_id}
                fields = {"workspace_id": workspace_id, **identity, **state, "created_at": when}
                new = emit(self._ctx, tx, "workspace_created", workspace_id, fields, creating=True)
            else:
                held = (row["tenant"], row["principal"], row["session_id"])
                if held != (tenant, principal, session_id):
                    raise LedgerStateError(
                        f"workspace {workspace_id} belongs to tenant {held[0]} principal {held[1]} "
                        f"session {held[2]}, not to tenant {tenant} principal {principal} session "
                        f"{session_id}: whose workspace it is never changes"
                    )
                if not _live(row):
                    state.update(created_at=when, removed_at=None)
                new = emit(self._ctx, tx, "workspace_committed", workspace_id, state, current=row)
        return _record(new)

    def used(self, workspace_id: str, at: datetime) -> bool:
        """Mark the live workspace used ``at``; False when it is not live (removed meanwhile)."""
        # Not flushed on its own: a last use lost to a crash only makes a workspace look older.
        with self._ctx.write(durable=False) as tx:
            row = tx.row("workspaces", workspace_id)
            if row is None or not _live(row):
                return False
            emit(self._ctx, tx, "workspace_used", workspace_id, {"last_used": to_text(at)}, current=row)
        return True

    def removed(
        self, workspace_id: str, *, at: datetime, unused_before: datetime | None = None
    ) -> WorkspaceRecord | None:
        """Record the workspace removed ``at`` and return it as it was; None when it was not live,
        or (``unused_before``) was used at or after that moment. The check and the removal are one
        write transaction, so of two replicas pruning at once exactly one removes it."""
        with self._ctx.write() as tx:
            row = tx.row("workspaces", workspace_id)
            if row is None or not _live(row):
                return None
            if unused_before is not None and str(row["last_used"]) >= to_text(unused_before):
                return None
            fields: dict[str, str | int | None] = {
                "version": None,
                "files": 0,
                "bytes": 0,
                "removed_at": to_text(at),
            }
            emit(self._ctx, tx, "workspace_removed", workspace_id, fields, current=row)
        return _record(row)
