"""Ledgers written before MCP sessions were bound gain the ``mcp_sessions`` table when opened, in
place (see :mod:`tests.ledger._added_table`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.ledger import StoreLedger
from tests.ledger._added_table import postgres_database_gains, sqlite_file_gains

SESSION = "0123456789abcdef0123456789abcdef"


def _bind(ledger: StoreLedger) -> int:
    assert ledger.session_binding(SESSION) is None
    ledger.bind_session(SESSION, principal="alice", tenant="acme")
    bound = ledger.session_binding(SESSION)
    assert bound is not None and (bound.principal, bound.tenant) == ("alice", "acme")
    return 1


def test_an_old_sqlite_file_gains_the_table_and_keeps_verifying(tmp_path: Path) -> None:
    sqlite_file_gains("mcp_sessions", tmp_path, _bind)


@pytest.mark.postgres
def test_an_older_postgres_ledger_gains_the_table_and_keeps_verifying(postgres_url: str) -> None:
    postgres_database_gains("mcp_sessions", postgres_url, _bind)
