"""Ledgers written before input rounds were relayed between replicas gain the ``input_rounds``
table when opened, in place (see :mod:`tests.ledger._added_table`); the rounds are outside the
hash chain, so an old chain keeps verifying."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from codemode.ledger import StoreLedger, round_key
from tests.ledger._added_table import LATER, postgres_database_gains, sqlite_file_gains


def _round(ledger: StoreLedger) -> int:
    key = round_key("token.nonce")
    book = ledger.input_rounds
    book.opened(key, principal="alice", tenant="", replica="a:1", expires_at=LATER + timedelta(minutes=1))
    assert book.answer(key, principal="alice", tenant="", answer_json="{}")[0] == "answered"
    return 0  # no events: transport state


def test_an_old_sqlite_file_gains_the_table_and_keeps_verifying(tmp_path: Path) -> None:
    sqlite_file_gains("input_rounds", tmp_path, _round)


@pytest.mark.postgres
def test_an_older_postgres_ledger_gains_the_table_and_keeps_verifying(postgres_url: str) -> None:
    postgres_database_gains("input_rounds", postgres_url, _round)
