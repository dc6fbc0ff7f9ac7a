"""Ledgers written before plans existed gain the ``plans`` table when opened, in place: the old
chain still verifies, a plan extends it, and ``codemode ledger verify`` passes. On SQLite (the dump
of a file from an earlier codemode) and on PostgreSQL (a database whose table is dropped, as an
earlier codemode created it)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from codemode.ledger import PlanRecord, StoreLedger
from tests.ledger._added_table import LATER, postgres_database_gains, sqlite_file_gains

PLAN = PlanRecord(
    plan_id="plan_00000000000000aa",
    run_id="run-plan",
    principal="alice",
    tenant="acme",
    code_digest="cd" * 32,
    code="1 + 1",
    calls=({"index": 0, "server": "crm", "tool": "add_note", "arguments": {}},),
    reads=(),
    created_at=LATER,
    expires_at=LATER + timedelta(days=1),
)


def _record(ledger: StoreLedger) -> int:
    assert ledger.get_plan(PLAN.plan_id) is None
    ledger.record_plan(PLAN)
    assert ledger.get_plan(PLAN.plan_id) == PLAN
    return 1


def test_an_old_sqlite_file_gains_the_table_and_keeps_verifying(tmp_path: Path) -> None:
    sqlite_file_gains("plans", tmp_path, _record)


@pytest.mark.postgres
def test_an_older_postgres_ledger_gains_the_table_and_keeps_verifying(postgres_url: str) -> None:
    postgres_database_gains("plans", postgres_url, _record)
