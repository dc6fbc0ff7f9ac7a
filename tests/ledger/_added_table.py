"""The test every table added to schema version 1 gets: a ledger written before it existed gains
it when opened, in place; the old chain still verifies, the new rows extend it, and
``codemode ledger verify`` passes. On SQLite (the dump of a file from an earlier codemode) and on
PostgreSQL (a database whose table is dropped, as an earlier codemode created it)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from click.testing import CliRunner
from psycopg import sql

from codemode.cli._ledger_cmd import ledger as ledger_group
from codemode.ledger import StoreLedger, open_ledger
from tests.ledger.conftest import BINDING
from tests.ledger.test_schema_compat import DUMP

LATER = datetime(2026, 6, 1, tzinfo=UTC)

Use = Callable[[StoreLedger], int]
"""Writes rows of the new table (and checks them); how many events that took."""


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _use_and_verify(ledger: StoreLedger, events_before: int, use: Use) -> None:
    added = use(ledger)
    report = ledger.verify()
    assert report.ok, report.problems
    assert report.events == events_before + added


def sqlite_file_gains(table: str, tmp_path: Path, use: Use) -> None:
    path = tmp_path / "codemode.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(DUMP.read_text(encoding="utf-8"))
        assert table not in _tables(conn), "the dump is of a file older than the table"
    with open_ledger(path, create=False, recover=False, clock=lambda: LATER) as ledger:
        old = ledger.verify()
        assert old.ok, old.problems
        _use_and_verify(ledger, old.events, use)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert table in _tables(conn)
    config = tmp_path / "codemode.toml"
    config.write_text(f'[ledger]\npath = "{path}"\n', encoding="utf-8")
    verified = CliRunner().invoke(ledger_group, ["verify", "--config", str(config)])
    assert verified.exit_code == 0, verified.output


def postgres_database_gains(table: str, url: str, use: Use) -> None:
    with open_ledger(url, clock=lambda: LATER) as ledger:
        ledger.begin_run(BINDING, "sha256:code")
    with psycopg.connect(url, autocommit=True) as conn:  # as an earlier codemode created it
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    with open_ledger(url, create=False, recover=False, clock=lambda: LATER) as ledger:
        _use_and_verify(ledger, 1, use)
