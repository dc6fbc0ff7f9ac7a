"""A workspace survives its index failing around a commit or a load, and a commit removes only the
version it replaced (never another replica's commit in progress)."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from codemode.errors import LedgerError
from codemode.ledger import WorkspaceBook
from codemode.workspace import Quota, WorkspaceEntry, WorkspaceError, WorkspaceKey, WorkspaceStore

ALICE = WorkspaceKey("acme", "alice")


class FlakyIndex:
    """The ledger's workspace table, failing where a test says: after recording a commit (as a
    connection lost after COMMIT does), or when a load marks the workspace used."""

    def __init__(self, book: WorkspaceBook) -> None:
        self.book = book
        self.fail_after_commit = False
        self.fail_use = False

    def find(self, workspace_id: str) -> WorkspaceEntry | None:
        return self.book.find(workspace_id)

    def listed(self, *, tenant: str | None = None, principal: str | None = None) -> Any:
        return self.book.listed(tenant=tenant, principal=principal)

    def committed(self, workspace_id: str, **fields: Any) -> WorkspaceEntry:
        entry = self.book.committed(workspace_id, **fields)
        if self.fail_after_commit:
            raise LedgerError("the connection was lost after COMMIT")
        return entry

    def used(self, workspace_id: str, at: datetime) -> bool:
        if self.fail_use:
            raise LedgerError("the ledger is busy")
        return self.book.used(workspace_id, at)

    def removed(self, workspace_id: str, **fields: Any) -> Any:
        return self.book.removed(workspace_id, **fields)


def store(tmp_path: Path, index: FlakyIndex) -> WorkspaceStore:
    return WorkspaceStore(tmp_path / "ws", index=index, quota=Quota(bytes=1000, files=10), ttl_s=100.0)  # pyright: ignore[reportArgumentType]


def test_a_commit_the_index_recorded_before_failing_keeps_its_files(
    tmp_path: Path, index: WorkspaceBook
) -> None:
    flaky = FlakyIndex(index)
    ws = store(tmp_path, flaky)
    ws.commit(ALICE, {"a.txt": b"old"})
    flaky.fail_after_commit = True
    with pytest.raises(WorkspaceError, match="lost after COMMIT"):
        ws.commit(ALICE, {"a.txt": b"new"})
    flaky.fail_after_commit = False
    assert ws.load(ALICE) == {"a.txt": b"new"}  # the index names it live, and its files are there


def test_a_load_whose_last_use_cannot_be_recorded_still_returns_the_files(
    tmp_path: Path, index: WorkspaceBook
) -> None:
    flaky = FlakyIndex(index)
    ws = store(tmp_path, flaky)
    ws.commit(ALICE, {"a.txt": b"kept"})
    flaky.fail_use = True
    assert ws.load(ALICE) == {"a.txt": b"kept"}


def test_a_commit_removes_the_version_it_replaced_and_old_leftovers_only(
    tmp_path: Path, index: WorkspaceBook
) -> None:
    ws = store(tmp_path, FlakyIndex(index))
    ws.commit(ALICE, {"a.txt": b"1"})
    folder = tmp_path / "ws" / ALICE.digest
    first = index.find(ALICE.digest)
    assert first is not None
    in_progress = folder / "v-00000000inflight"  # another replica writing its commit now
    in_progress.mkdir()
    leftover = folder / "v-0000000000killed"  # a commit killed hours ago
    leftover.mkdir()
    hours_ago = time.time() - 3 * 3600
    os.utime(leftover, (hours_ago, hours_ago))
    ws.commit(ALICE, {"a.txt": b"2"})
    now = index.find(ALICE.digest)
    assert now is not None
    assert sorted(p.name for p in folder.iterdir()) == sorted([now.version or "", in_progress.name])
