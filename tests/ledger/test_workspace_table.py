"""Ledgers written before workspaces' metadata moved into the ledger gain the ``workspaces`` table
when opened, in place (see :mod:`tests.ledger._added_table`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from codemode.ledger import StoreLedger
from tests.ledger._added_table import postgres_database_gains, sqlite_file_gains

USED = datetime(2026, 5, 1, tzinfo=UTC)


def _record(ledger: StoreLedger) -> int:
    book = ledger.workspaces
    assert book.listed() == []
    book.committed(
        "ws1", tenant="acme", principal="alice", session_id=None, version="v-1", files=1, bytes=3, at=USED
    )
    assert book.used("ws1", USED)
    assert [(w.tenant, w.version, w.files) for w in book.listed()] == [("acme", "v-1", 1)]
    return 2  # created, then used


def test_an_old_sqlite_file_gains_the_table_and_keeps_verifying(tmp_path: Path) -> None:
    sqlite_file_gains("workspaces", tmp_path, _record)


@pytest.mark.postgres
def test_an_older_postgres_ledger_gains_the_table_and_keeps_verifying(postgres_url: str) -> None:
    postgres_database_gains("workspaces", postgres_url, _record)
