"""Workspaces: files that outlive a run, kept on the host per tenant, principal and session.

:class:`WorkspaceStore` keeps them (quota, time to live, whole-or-nothing commits, no link ever
followed): the files in a directory, their metadata in a :class:`WorkspaceIndex` (the ledger's
``workspaces`` table, which the engine and the CLI pass in); :func:`open_store` builds one from
``[workspace]``. The sandbox only carries the files in and out of a run; the engine decides which
workspace a run gets.
"""

from __future__ import annotations

from codemode.config import Config
from codemode.workspace._index import WorkspaceEntry, WorkspaceIndex
from codemode.workspace._paths import MAX_PATH_CHARS, path_problem
from codemode.workspace._store import (
    Quota,
    WorkspaceError,
    WorkspaceInfo,
    WorkspaceKey,
    WorkspaceQuotaError,
    WorkspaceStore,
)

__all__ = [
    "MAX_PATH_CHARS",
    "Quota",
    "WorkspaceEntry",
    "WorkspaceError",
    "WorkspaceIndex",
    "WorkspaceInfo",
    "WorkspaceKey",
    "WorkspaceQuotaError",
    "WorkspaceStore",
    "open_store",
    "path_problem",
]


def open_store(config: Config, index: WorkspaceIndex) -> WorkspaceStore:
    """The store ``[workspace]`` describes, its metadata in ``index`` (``StoreLedger.workspaces``
    of the configured ledger). Nothing is created until a workspace has files."""
    settings = config.workspace
    return WorkspaceStore(
        config.workspace_root,
        index=index,
        quota=Quota(bytes=settings.quota_bytes, files=settings.quota_files),
        ttl_s=settings.ttl_s,
    )
