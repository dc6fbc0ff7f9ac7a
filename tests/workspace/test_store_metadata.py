"""Workspaces' metadata lives in the ledger's table, their bytes in the directory: folders of an
earlier codemode (``meta.json``) are recorded once; a workspace the table lists without its files,
or a folder the table does not list, is reported and nothing of it is lost."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from codemode.ledger import StoreLedger, WorkspaceBook
from codemode.workspace import Quota, WorkspaceError, WorkspaceKey, WorkspaceStore

ALICE = WorkspaceKey("acme", "alice")
SESSION = WorkspaceKey("acme", "alice", "ses_1")
NOW = 1_800_000_000.0


def store(tmp_path: Path, index: WorkspaceBook, *, now: float = NOW) -> WorkspaceStore:
    return WorkspaceStore(
        tmp_path / "ws", index=index, quota=Quota(bytes=1000, files=10), ttl_s=100.0, clock=lambda: now
    )


def earlier_folder(root: Path, key: WorkspaceKey, last_used: float, files: dict[str, bytes]) -> Path:
    """A workspace as an earlier codemode left it: meta.json, a ``current`` link, one version."""
    folder = root / key.digest
    version = folder / "v-0123456789abcdef"
    for name, data in files.items():
        (version / name).parent.mkdir(parents=True, exist_ok=True)
        (version / name).write_bytes(data)
    meta = {"tenant": key.tenant, "principal": key.principal, "session": key.session, "last_used": last_used}
    (folder / "meta.json").write_text(json.dumps(meta))
    os.symlink("v-0123456789abcdef", folder / "current")
    return folder


def test_the_metadata_is_in_the_table_and_the_folder_holds_only_files(
    tmp_path: Path, index: WorkspaceBook
) -> None:
    ws = store(tmp_path, index)
    ws.commit(SESSION, {"a.txt": b"12", "d/b.txt": b"345"})
    entry = index.find(SESSION.digest)
    assert entry is not None
    assert (entry.tenant, entry.principal, entry.session_id) == ("acme", "alice", "ses_1")
    assert (entry.files, entry.bytes, entry.last_used.timestamp()) == (2, 5, NOW)
    assert sorted(p.name for p in (tmp_path / "ws" / SESSION.digest).iterdir()) == [entry.version]
    assert [(i.key, i.files, i.bytes, i.missing) for i in ws.workspaces()] == [(SESSION, 2, 5, False)]


def test_a_folder_of_an_earlier_codemode_is_recorded_once_and_ages_from_its_meta(
    tmp_path: Path, ledger: StoreLedger, index: WorkspaceBook
) -> None:
    folder = earlier_folder(tmp_path / "ws", ALICE, NOW - 30, {"notes.txt": b"old", "d/x": b"1"})
    ws = store(tmp_path, index)
    [info] = ws.workspaces()
    assert (info.key, info.files, info.bytes, info.last_used) == (ALICE, 2, 4, NOW - 30)
    assert not (folder / "meta.json").exists() and not (folder / "current").exists()
    assert ws.load(ALICE) == {"notes.txt": b"old", "d/x": b"1"}
    assert [e.kind for e in ledger.events()] == ["workspace_created", "workspace_used"]
    assert ledger.verify().ok
    # The time to live is decided from the table: unused for 150 s now, ttl 100 s.
    assert [i.key for i in store(tmp_path, index, now=NOW + 150).prune()] == [ALICE]
    assert not folder.exists()


def test_an_earlier_folder_is_found_by_its_owner_before_any_listing(
    tmp_path: Path, index: WorkspaceBook
) -> None:
    earlier_folder(tmp_path / "ws", ALICE, NOW - 30, {"notes.txt": b"old"})
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"notes.txt": b"old", "new.txt": b"n"})  # a run that read and added
    assert ws.load(ALICE) == {"notes.txt": b"old", "new.txt": b"n"}
    assert len(list((tmp_path / "ws" / ALICE.digest).iterdir())) == 1


def test_a_listed_workspace_whose_files_are_gone_is_reported_and_kept(
    tmp_path: Path, index: WorkspaceBook
) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"a.txt": b"1"})
    entry = index.find(ALICE.digest)
    assert entry is not None and entry.version is not None
    (tmp_path / "ws" / ALICE.digest / entry.version).rename(tmp_path / "elsewhere")
    for attempt in (lambda: ws.load(ALICE), lambda: ws.listing(ALICE), lambda: ws.commit(ALICE, {})):
        with pytest.raises(WorkspaceError, match=r"its files are not in .*workspace rm --all"):
            attempt()
    assert index.find(ALICE.digest) == entry, "a refused commit replaced nothing"
    assert [(i.key, i.missing) for i in ws.workspaces()] == [(ALICE, True)]
    assert ws.prune() == []  # not yet past its time to live
    assert ws.remove(ALICE) is True  # forgets it
    assert ws.workspaces() == [] and index.find(ALICE.digest) is None
    assert (tmp_path / "elsewhere" / "a.txt").read_bytes() == b"1"


def test_a_folder_the_table_does_not_list_is_reported_and_never_pruned(
    tmp_path: Path, index: WorkspaceBook
) -> None:
    ws = store(tmp_path, index)
    stray = tmp_path / "ws" / ("f" * 32) / "v-1"
    stray.mkdir(parents=True)
    (stray / "kept.txt").write_text("mine")
    assert ws.workspaces() == []
    assert ws.unrecorded() == [tmp_path / "ws" / ("f" * 32)]
    assert store(tmp_path, index, now=NOW + 10_000).prune() == []
    assert (stray / "kept.txt").read_text() == "mine"
