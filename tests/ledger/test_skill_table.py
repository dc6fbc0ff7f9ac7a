"""Ledgers written before skills were saved gain the ``skills`` table when opened, in place: the old
chain still verifies, skill versions extend it, and ``codemode ledger verify`` passes. On SQLite
(the dump of a file from an earlier codemode) and on PostgreSQL (a database whose table is
dropped, as an earlier codemode created it)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from codemode.cli._ledger_cmd import ledger as ledger_group
from codemode.ledger import StoreLedger, open_ledger
from tests.ledger._pg import PostgresServer
from tests.ledger.conftest import BINDING
from tests.ledger.test_schema_compat import DUMP

LATER = datetime(2026, 6, 1, tzinfo=UTC)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _save_and_verify(ledger: StoreLedger, events_before: int) -> None:
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
    report = ledger.verify()
    assert report.ok, report.problems
    assert report.events == events_before + 2


def test_an_old_sqlite_file_gains_the_table_and_keeps_verifying(tmp_path: Path) -> None:
    path = tmp_path / "codemode.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(DUMP.read_text(encoding="utf-8"))
        assert "skills" not in _tables(conn), "the dump is of a file older than the table"
    with open_ledger(path, create=False, recover=False, clock=lambda: LATER) as ledger:
        old = ledger.verify()
        assert old.ok, old.problems
        _save_and_verify(ledger, old.events)
    config = tmp_path / "codemode.toml"
    config.write_text(f'[ledger]\npath = "{path}"\n', encoding="utf-8")
    verified = CliRunner().invoke(ledger_group, ["verify", "--config", str(config)])
    assert verified.exit_code == 0, verified.output


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    name = postgres_server.new_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)


@pytest.mark.postgres
def test_an_older_postgres_ledger_gains_the_table_and_keeps_verifying(postgres_url: str) -> None:
    with open_ledger(postgres_url, clock=lambda: LATER) as ledger:
        ledger.begin_run(BINDING, "sha256:code")
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as an earlier codemode created it
        conn.execute("DROP TABLE skills")
    with open_ledger(postgres_url, create=False, recover=False, clock=lambda: LATER) as ledger:
        _save_and_verify(ledger, 1)
