"""Ledgers written before skills were saved gain the ``skills`` table when opened, in place (see
:mod:`tests.ledger._added_table`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.ledger import StoreLedger
from tests.ledger._added_table import postgres_database_gains, sqlite_file_gains


def _save(ledger: StoreLedger) -> int:
    assert ledger.skills.versions("acme") == []
    ledger.skills.propose(
        "acme",
        "greet",
        description="d",
        source="x = 1\n",
        digest="d",
        pin="p",
        deps={},
        proposed_by="a",
        approve=True,
    )
    assert list(ledger.skills.active("acme")) == ["greet"]
    return 2  # proposed, then approved


def test_an_old_sqlite_file_gains_the_table_and_keeps_verifying(tmp_path: Path) -> None:
    sqlite_file_gains("skills", tmp_path, _save)


@pytest.mark.postgres
def test_an_older_postgres_ledger_gains_the_table_and_keeps_verifying(postgres_url: str) -> None:
    postgres_database_gains("skills", postgres_url, _save)
