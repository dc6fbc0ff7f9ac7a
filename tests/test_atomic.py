"""A file is replaced whole or not at all (the lock, the credential store, batch results)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TextIO

import pytest

from codemode._atomic import replace_file


def test_the_new_text_replaces_the_old_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text("old\n")
    replace_file(path, lambda handle: handle.write("new\n"))
    assert path.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_a_writer_that_fails_leaves_the_previous_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text("complete\n" * 1000)

    def half_then_crash(handle: TextIO) -> None:
        handle.write("partial\n")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_file(path, half_then_crash)
    assert path.read_text() == "complete\n" * 1000
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_a_new_file_takes_the_mode_asked_for_and_a_replaced_one_may_keep_its_own(tmp_path: Path) -> None:
    private = tmp_path / "store.json"
    replace_file(private, lambda handle: handle.write("{}"), mode=0o600)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    shared = tmp_path / "results.jsonl"
    shared.write_text("")
    shared.chmod(0o640)
    replace_file(shared, lambda handle: handle.write("x"), keep_mode=True)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640
