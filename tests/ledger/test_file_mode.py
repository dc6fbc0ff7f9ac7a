"""The ledger file, its WAL, shared memory and lock file are private to their owner (0600)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from codemode.ledger import CallIntent, Fresh, SqliteLedger

Intent = Callable[..., CallIntent]
SIDECARS = ("-wal", "-shm", ".lock")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def family(db: Path) -> list[Path]:
    return [db, *(Path(f"{db}{suffix}") for suffix in SIDECARS)]


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """The usual umask, under which SQLite alone would create a world-readable 0644 file."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def test_a_new_ledger_and_its_sidecars_are_created_0600(
    open_at: Callable[..., SqliteLedger], db_path: Path, intent: Intent
) -> None:
    ledger = open_at()
    assert isinstance(ledger.reserve(intent()), Fresh)  # the WAL holds a write
    for path in family(db_path):
        assert path.exists(), path
        assert mode(path) == 0o600, (path, oct(mode(path)))


def test_an_older_looser_ledger_is_tightened_on_open(
    open_at: Callable[..., SqliteLedger], db_path: Path, intent: Intent
) -> None:
    first = open_at()
    first.reserve(intent())  # keeps -wal and -shm in place while it is open
    for path in family(db_path):
        path.chmod(0o644)
    assert mode(db_path) == 0o644
    second = open_at()
    for path in family(db_path):
        assert mode(path) == 0o600, (path, oct(mode(path)))
    assert second.get_call(intent().call_id) is not None


def test_only_group_and_other_bits_are_dropped_and_the_directory_is_left_alone(
    open_at: Callable[..., SqliteLedger], db_path: Path
) -> None:
    db_path.parent.chmod(0o755)
    open_at().close()
    db_path.chmod(0o764)  # an odd mode: the owner's own bits are the owner's choice
    open_at()
    assert mode(db_path) == 0o700
    assert mode(db_path.parent) == 0o755  # the directory is the user's business, not the ledger's
