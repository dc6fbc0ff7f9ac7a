"""Ledgers written before sandbox sessions were claimed in the ledger gain the ``sandbox_sessions``
table when opened, in place (see :mod:`tests.ledger._added_table`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.ledger import StoreLedger
from tests.ledger._added_table import postgres_database_gains, sqlite_file_gains


def _record(ledger: StoreLedger) -> int:
    book = ledger.sandbox_sessions
    assert book.find("acme", "alice", "ses_1") is None
    assert book.claim("acme", "alice", "ses_1", replica="replica-a", hold_s=60).claimed
    assert book.release("acme", "alice", "ses_1", replica="replica-a")
    return 2  # opened, then closed


def test_an_old_sqlite_file_gains_the_table_and_keeps_verifying(tmp_path: Path) -> None:
    sqlite_file_gains("sandbox_sessions", tmp_path, _record)


@pytest.mark.postgres
def test_an_older_postgres_ledger_gains_the_table_and_keeps_verifying(postgres_url: str) -> None:
    postgres_database_gains("sandbox_sessions", postgres_url, _record)
