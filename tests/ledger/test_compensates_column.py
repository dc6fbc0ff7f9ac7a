"""A ledger from before calls gained ``compensates`` gains it in place, and verifies after."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from codemode.calls import ToolResult
from codemode.cli._ledger_cmd import ledger as ledger_group
from codemode.ledger import Fresh, open_ledger
from tests.ledger.conftest import make_intent

DUMP = Path(__file__).parent / "data" / "ledger_v1.sql"


def _columns(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {str(row[1]) for row in conn.execute("PRAGMA table_info(calls)")}


def _indexes(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {str(row[1]) for row in conn.execute("PRAGMA index_list(calls)")}


def test_an_old_sqlite_ledger_gains_the_column_in_place_and_verifies(tmp_path: Path) -> None:
    path = tmp_path / "codemode.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(DUMP.read_text(encoding="utf-8"))
    assert "compensates" not in _columns(path)
    with open_ledger(path, create=False, recover=False) as ledger:
        assert "compensates" in _columns(path) and "calls_compensates" in _indexes(path)
        assert ledger.verify().ok  # the old events re-derive to rows whose new column is NULL
        fresh = ledger.reserve(make_intent(900, key="undo-1", compensates="run-1/1"))
        assert isinstance(fresh, Fresh)
        ledger.mark_sent(fresh.call_id)
        ledger.complete(fresh.call_id, ToolResult())
        assert [c.call_id for c in ledger.compensations_of(["run-1/1"])] == [fresh.call_id]
        assert ledger.verify().ok
    (tmp_path / "codemode.toml").write_text("", encoding="utf-8")  # the ledger beside it, by default
    checked = CliRunner().invoke(ledger_group, ["verify", "--config", str(tmp_path / "codemode.toml")])
    assert checked.exit_code == 0, checked.output


@pytest.mark.postgres
def test_an_old_postgres_ledger_gains_the_column_in_place(postgres_url: str) -> None:
    url = postgres_url
    with open_ledger(url) as ledger:
        first = ledger.reserve(make_intent(1, key="k1"))
        assert isinstance(first, Fresh)
    with psycopg.connect(url, autocommit=True) as conn:  # as an earlier codemode created it
        conn.execute("ALTER TABLE calls DROP COLUMN compensates")
    with open_ledger(url, create=False) as ledger:
        undo = ledger.reserve(make_intent(2, key="undo-1", compensates=first.call_id))
        assert isinstance(undo, Fresh)
        assert [c.call_id for c in ledger.compensations_of([first.call_id])] == [undo.call_id]
        assert ledger.verify().ok
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_indexes WHERE indexname = 'calls_compensates'").fetchall()
        assert found, "the column's index came with it"
