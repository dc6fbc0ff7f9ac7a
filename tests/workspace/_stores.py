"""Workspace stores for tests, their metadata in a real ledger (the only index there is)."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from contextlib import contextmanager

from codemode.config import Config
from codemode.ledger import open_ledger
from codemode.workspace import Quota, WorkspaceStore


@contextmanager
def configured_store(config: Config, *, clock: Callable[[], float] = time.time) -> Generator[WorkspaceStore]:
    """The store ``config`` describes, on its configured ledger (as the CLI and the engine open it)."""
    settings = config.workspace
    with open_ledger(config.ledger_location()) as ledger:
        yield WorkspaceStore(
            config.workspace_root,
            index=ledger.workspaces,
            quota=Quota(bytes=settings.quota_bytes, files=settings.quota_files),
            ttl_s=settings.ttl_s,
            clock=clock,
        )
