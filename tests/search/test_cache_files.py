"""The search cache's files are read only when this user alone could have written them, checked on
the open file: a link, a file of another user or one in a folder others can write is ignored (and
costs one rebuild), never trusted. An entry of another principal must not answer under this one's name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codemode.search import CachedRow, CachedSearch, SearchDocument, ToolIndex, read_sealed, write_sealed
from codemode.search._cache_files import read_private
from codemode.search._semantic import EmbeddingCache

DOCS = [
    SearchDocument("crm/get_customer", "crm", "get_customer", None, "Fetch one customer by id.", ()),
    SearchDocument("crm/delete_customer", "crm", "delete_customer", None, "Delete a customer.", ()),
]


def entry(docs: list[SearchDocument]) -> CachedSearch:
    return CachedSearch(
        ToolIndex.build(docs), {d.key: CachedRow(d.server, d.name, d.key, "p", "i", "s") for d in docs}
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    made = tmp_path / "search"
    entry(DOCS).save("everyone", made)
    assert CachedSearch.load("everyone", made) is not None
    return made


def test_a_new_cache_folder_is_private(tmp_path: Path) -> None:
    write_sealed(tmp_path / "a" / "b" / "memo.bin", b"payload")
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o700
    assert read_sealed(tmp_path / "a" / "b" / "memo.bin") == b"payload"


def test_an_entry_linked_from_another_key_in_a_shared_folder_is_refused(folder: Path) -> None:
    # Someone who may write the folder links the index of everyone under a restricted principal's key.
    os.link(folder / "everyone.bin", folder / "clerk.bin")
    assert CachedSearch.load("clerk", folder) is not None  # a private folder: only this user made the link
    folder.chmod(0o777)
    assert CachedSearch.load("clerk", folder) is None
    assert CachedSearch.load("everyone", folder) is None
    entry(DOCS[:1]).save("fresh", folder)  # the folder is this user's: closed and emptied first
    assert not (folder / "clerk.bin").exists() and CachedSearch.load("fresh", folder) is not None


def test_a_symbolic_link_is_never_followed(folder: Path, tmp_path: Path) -> None:
    (folder / "everyone.bin").rename(tmp_path / "elsewhere.bin")
    (folder / "everyone.bin").symlink_to(tmp_path / "elsewhere.bin")
    assert CachedSearch.load("everyone", folder) is None
    with pytest.raises(OSError):
        read_private(folder / "everyone.bin")


def test_a_file_others_may_write_or_of_another_user_is_refused(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (folder / "everyone.bin").chmod(0o646)
    assert CachedSearch.load("everyone", folder) is None
    (folder / "everyone.bin").chmod(0o600)
    assert CachedSearch.load("everyone", folder) is not None
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)  # the files now belong to someone else
    assert CachedSearch.load("everyone", folder) is None


def test_a_fifo_in_place_of_an_entry_is_refused_without_blocking(folder: Path) -> None:
    (folder / "everyone.bin").unlink()
    os.mkfifo(folder / "everyone.bin", 0o600)
    assert CachedSearch.load("everyone", folder) is None


def test_vectors_in_a_shared_folder_are_not_loaded(tmp_path: Path) -> None:
    import numpy as np

    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "vectors.npz"
    np.savez(path, keys=np.asarray(["k"]), vectors=np.ones((1, 4), np.float32))
    path.chmod(0o600)
    assert len(EmbeddingCache(path)) == 1
    folder.chmod(0o777)
    assert len(EmbeddingCache(path)) == 0


def test_an_own_folder_others_could_write_is_closed_and_emptied_on_the_next_save(folder: Path) -> None:
    # An older version, or a umask of 002, left the folder group-writable: reads refuse it, and the
    # next save closes it and drops what anyone could have put there, so the cache works again.
    folder.chmod(0o775)
    (folder / "planted.bin").write_bytes(b"anyone's")
    assert CachedSearch.load("everyone", folder) is None
    entry(DOCS[:1]).save("fresh", folder)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert sorted(p.name for p in folder.iterdir()) == ["fresh.bin"]
    assert CachedSearch.load("fresh", folder) is not None


def test_a_folder_of_another_user_is_never_changed(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder.chmod(0o777)
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)
    entry(DOCS[:1]).save("fresh", folder)
    assert folder.stat().st_mode & 0o777 == 0o777 and (folder / "everyone.bin").exists()
    assert not (folder / "fresh.bin").exists()
