"""A ledger's workspace table for the store tests (SQLite on a temporary file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode.ledger import StoreLedger, WorkspaceBook, open_ledger


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[StoreLedger]:
    with open_ledger(tmp_path / "ledger.db") as opened:
        yield opened


@pytest.fixture
def index(ledger: StoreLedger) -> WorkspaceBook:
    return ledger.workspaces
