"""Ledgers written before approval tickets moved into the ledger gain the ``approval_tickets``
table when opened, in place (see :mod:`tests.ledger._added_table`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from codemode.ledger import StoreLedger
from tests.ledger._added_table import postgres_database_gains, sqlite_file_gains

AT = datetime(2026, 5, 1, tzinfo=UTC)


def _record(ledger: StoreLedger) -> int:
    book = ledger.approval_tickets
    assert book.waiting(at=AT) == []
    book.opened(
        "run_1/0",
        run_id="run_1",
        tenant="acme",
        principal="alice",
        server="crm",
        tool="add_note",
        risk="medium",
        why="medium risk",
        arguments_summary="{}",
        args_digest="sha256:00",
        expires_at=AT + timedelta(minutes=5),
        replica="a:8765",
        at=AT,
    )
    book.answered("run_1/0", approve=True, by="ops", on="b:8765", at=AT)
    found = book.find("run_1/0")
    assert found is not None and (found.state, found.approved) == ("answered", True)
    return 2  # opened, then answered


def test_an_old_sqlite_file_gains_the_table_and_keeps_verifying(tmp_path: Path) -> None:
    sqlite_file_gains("approval_tickets", tmp_path, _record)


@pytest.mark.postgres
def test_an_older_postgres_ledger_gains_the_table_and_keeps_verifying(postgres_url: str) -> None:
    postgres_database_gains("approval_tickets", postgres_url, _record)
