"""What a run leaves in its workspace is kept as a new version only when it changed something:
a run that reads its files, or never touches them, rewrites nothing (the files travel in and out
of every run, so a copy per run would cost each run the whole workspace on disk)."""

from __future__ import annotations

from pathlib import Path

import anyio

from codemode.calls import RunBinding
from codemode.engine._workspace import RunWorkspaces
from codemode.ledger import WorkspaceBook
from codemode.sandbox import RunOutcome, WorkspaceFiles, WorkspaceReturn
from codemode.workspace import Quota, WorkspaceKey, WorkspaceStore

ALICE = RunBinding(run_id="run-1", principal="alice", tenant="acme", trace_id="0" * 32)


def versions(root: Path) -> list[str]:
    folder = root / WorkspaceKey("acme", "alice").digest
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("v-"))


def keep(workspaces: RunWorkspaces, before: dict[str, bytes], after: dict[str, bytes]) -> tuple[str, ...]:
    outcome = RunOutcome(
        status="ok",
        run_id="run-1",
        backend="process",
        workspace=WorkspaceReturn(files=after, refused={}, error=None),
    )
    program = WorkspaceFiles(before, 1000, 10)
    _, written = anyio.run(workspaces.keep, program, ALICE, None, outcome)
    return written


def test_a_run_that_changed_nothing_writes_no_new_version(tmp_path: Path, index: WorkspaceBook) -> None:
    store = WorkspaceStore(tmp_path / "ws", index=index, quota=Quota(bytes=1000, files=10), ttl_s=100.0)
    workspaces = RunWorkspaces(store)
    assert keep(workspaces, {}, {"notes.txt": b"one"}) == ("notes.txt",)
    first = versions(tmp_path / "ws")

    assert keep(workspaces, {"notes.txt": b"one"}, {"notes.txt": b"one"}) == ()
    assert versions(tmp_path / "ws") == first

    assert keep(workspaces, {"notes.txt": b"one"}, {"notes.txt": b"two"}) == ("notes.txt",)
    assert store.load(WorkspaceKey("acme", "alice")) == {"notes.txt": b"two"}
