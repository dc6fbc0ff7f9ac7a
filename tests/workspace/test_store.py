"""The workspace store: keying, whole-or-nothing commits, quotas, the time to live, no link followed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from codemode.config import config_from_mapping
from codemode.ledger import WorkspaceBook
from codemode.workspace import (
    Quota,
    WorkspaceError,
    WorkspaceKey,
    WorkspaceQuotaError,
    WorkspaceStore,
    open_store,
)

ALICE = WorkspaceKey("acme", "alice")
BOB = WorkspaceKey("acme", "bob")
OTHER_TENANT = WorkspaceKey("globex", "alice")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def store(
    tmp_path: Path, index: WorkspaceBook, *, quota: Quota | None = None, clock: Clock | None = None
) -> WorkspaceStore:
    return WorkspaceStore(
        tmp_path / "ws",
        index=index,
        quota=quota or Quota(bytes=1000, files=10),
        ttl_s=100.0,
        clock=clock or Clock(),
    )


def test_files_committed_are_loaded_back_and_kept_apart_per_key(tmp_path: Path, index: WorkspaceBook) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"notes.txt": b"hello", "out/data.csv": b"a,b\n"})
    assert ws.load(ALICE) == {"notes.txt": b"hello", "out/data.csv": b"a,b\n"}
    assert ws.load(BOB) == {}
    assert ws.load(OTHER_TENANT) == {}
    assert ws.load(WorkspaceKey("acme", "alice", "ses_1")) == {}
    assert ws.listing(ALICE) == {"notes.txt": 5, "out/data.csv": 4}
    assert ws.read(ALICE, "out/data.csv") == b"a,b\n"


def test_a_commit_replaces_the_whole_workspace(tmp_path: Path, index: WorkspaceBook) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"a": b"1", "b": b"2"})
    ws.commit(ALICE, {"b": b"3"})
    assert ws.load(ALICE) == {"b": b"3"}
    versions = [p.name for p in (tmp_path / "ws" / ALICE.digest).iterdir() if p.name.startswith("v-")]
    assert len(versions) == 1


def test_nothing_is_created_for_an_empty_workspace(tmp_path: Path, index: WorkspaceBook) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {})
    assert not (tmp_path / "ws" / ALICE.digest).exists()
    assert ws.workspaces() == []


@pytest.mark.parametrize(
    ("files", "quota"),
    [
        ({"big": b"x" * 1001}, Quota(bytes=1000, files=10)),
        ({f"f{i}": b"" for i in range(11)}, Quota(bytes=1000, files=10)),
        # Folders count as entries too: 2 files + 1 folder.
        ({"d/a": b"", "d/b": b""}, Quota(bytes=1000, files=2)),
    ],
)
def test_a_commit_over_the_quota_changes_nothing(
    tmp_path: Path, index: WorkspaceBook, files: dict[str, bytes], quota: Quota
) -> None:
    ws = store(tmp_path, index, quota=quota)
    ws.commit(ALICE, {"earlier": b"kept"})
    with pytest.raises(WorkspaceQuotaError, match=r"quota is .*\[workspace\] quota_bytes"):
        ws.commit(ALICE, files)
    assert ws.load(ALICE) == {"earlier": b"kept"}


@pytest.mark.parametrize(
    "name", ["../escape", "/etc/passwd", "a/../../b", "a//b", "./a", "a/.", "", "nul\0byte", "x" * 1025]
)
def test_names_that_could_leave_the_workspace_are_refused(
    tmp_path: Path, index: WorkspaceBook, name: str
) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"earlier": b"kept"})
    with pytest.raises(WorkspaceError, match="cannot hold"):
        ws.commit(ALICE, {"fine": b"1", name: b"2"})
    assert ws.load(ALICE) == {"earlier": b"kept"}
    assert not (tmp_path / "escape").exists()


def test_a_file_that_is_also_a_folder_is_refused(tmp_path: Path, index: WorkspaceBook) -> None:
    ws = store(tmp_path, index)
    assert ws.check({"a": b"", "a/b": b""}) == {"a/b": "'a' is a file, so it cannot also be a folder"}


def test_a_failed_write_leaves_the_previous_version_whole(
    tmp_path: Path, index: WorkspaceBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"earlier": b"kept"})
    real_fsync = os.fsync
    calls = 0

    def disk_full(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        ws.commit(ALICE, {"one": b"1", "two": b"2"})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert ws.load(ALICE) == {"earlier": b"kept"}
    versions = [p.name for p in (tmp_path / "ws" / ALICE.digest).iterdir() if p.name.startswith("v-")]
    assert len(versions) == 1


def test_links_and_fifos_planted_in_a_stored_version_are_never_followed(
    tmp_path: Path, index: WorkspaceBook
) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"real": b"1"})
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    entry = index.find(ALICE.digest)
    assert entry is not None and entry.version is not None
    folder = tmp_path / "ws" / ALICE.digest / entry.version
    (folder / "link").symlink_to(secret)
    (folder / "linked_dir").symlink_to(tmp_path)
    os.mkfifo(folder / "fifo")
    assert ws.load(ALICE) == {"real": b"1"}
    with pytest.raises(WorkspaceError, match="no file 'link'"):
        ws.read(ALICE, "link")
    with pytest.raises(WorkspaceError, match="no file 'linked_dir/secret'"):
        ws.read(ALICE, "linked_dir/secret")


def test_a_live_version_replaced_by_a_link_is_reported_not_followed(
    tmp_path: Path, index: WorkspaceBook
) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"real": b"1"})
    entry = index.find(ALICE.digest)
    assert entry is not None and entry.version is not None
    version = tmp_path / "ws" / ALICE.digest / entry.version
    shutil.rmtree(version)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "real").write_text("not the workspace's")
    version.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(WorkspaceError, match="its files are not in"):
        ws.load(ALICE)


def test_prune_removes_only_workspaces_unused_for_the_ttl(tmp_path: Path, index: WorkspaceBook) -> None:
    clock = Clock()
    ws = store(tmp_path, index, clock=clock)
    ws.commit(ALICE, {"a": b"1"})
    clock.now += 60
    ws.commit(BOB, {"b": b"22"})
    clock.now += 50  # alice unused for 110 s, bob for 50 s; ttl 100 s
    gone = ws.prune()
    assert [(info.key, info.files, info.bytes) for info in gone] == [(ALICE, 1, 1)]
    assert ws.load(ALICE) == {}
    assert ws.load(BOB) == {"b": b"22"}


def test_loading_a_workspace_keeps_it_alive(tmp_path: Path, index: WorkspaceBook) -> None:
    clock = Clock()
    ws = store(tmp_path, index, clock=clock)
    ws.commit(ALICE, {"a": b"1"})
    clock.now += 90
    ws.load(ALICE)
    clock.now += 90
    assert ws.prune() == []


def test_workspaces_lists_and_filters(tmp_path: Path, index: WorkspaceBook) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"a": b"1"})
    ws.commit(OTHER_TENANT, {"b": b"12"})
    assert {info.key for info in ws.workspaces()} == {ALICE, OTHER_TENANT}
    assert [info.key for info in ws.workspaces(tenant="globex")] == [OTHER_TENANT]
    assert [info.bytes for info in ws.workspaces(tenant="globex", principal="alice")] == [2]


def test_remove_one_file_or_the_whole_workspace(tmp_path: Path, index: WorkspaceBook) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"a": b"1", "b": b"2"})
    assert ws.remove(ALICE, "a") is True
    assert ws.remove(ALICE, "a") is False
    assert ws.load(ALICE) == {"b": b"2"}
    assert ws.remove(ALICE) is True
    assert ws.remove(ALICE) is False
    assert ws.workspaces() == []


def test_the_store_is_private_to_its_user(tmp_path: Path, index: WorkspaceBook) -> None:
    ws = store(tmp_path, index)
    ws.commit(ALICE, {"a": b"1"})
    assert (tmp_path / "ws").stat().st_mode & 0o077 == 0
    assert (tmp_path / "ws" / ALICE.digest).stat().st_mode & 0o077 == 0


def test_open_store_follows_the_workspace_section(tmp_path: Path, index: WorkspaceBook) -> None:
    config = config_from_mapping(
        {"workspace": {"root": "files", "quota_bytes": 2048, "quota_files": 3, "ttl_s": 5}}
    ).with_origin("test", tmp_path)
    ws = open_store(config, index)
    assert (ws.root, ws.quota, ws.ttl_s) == (tmp_path / "files", Quota(bytes=2048, files=3), 5.0)
