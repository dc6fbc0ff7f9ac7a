"""Ledgers written before quotas were counted gain the ``quota_usage`` and ``quota_slots`` tables
when opened, in place (see :mod:`tests.ledger._added_table`); the counters are outside the hash
chain, so an old chain and the runs recorded after keep verifying."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.calls import RunBinding
from codemode.ledger import SlotLimit, StoreLedger, WindowLimit
from tests.ledger._added_table import postgres_database_gains, sqlite_file_gains

QUOTA_TABLES = ("quota_usage", "quota_slots")


def _count(ledger: StoreLedger) -> int:
    binding = RunBinding(run_id="run-quota", principal="alice", tenant="acme", trace_id="t")
    once = [WindowLimit("principal", "alice", "runs", "day", 1)]
    one = [SlotLimit("principal", "alice", 1)]
    assert ledger.quotas.begin_run(binding, "sha256:c", windows=once, slots=one, slot_ttl_s=60) is None
    again = binding.model_copy(update={"run_id": "run-quota-2"})
    assert ledger.quotas.begin_run(again, "sha256:c", windows=once, slots=one, slot_ttl_s=60) is not None
    ledger.quotas.release_run(binding.run_id)
    return 3  # run started; the refused run started and finished


@pytest.mark.parametrize("table", QUOTA_TABLES)
def test_an_old_sqlite_file_gains_the_table_and_keeps_verifying(table: str, tmp_path: Path) -> None:
    sqlite_file_gains(table, tmp_path, _count)


@pytest.mark.postgres
@pytest.mark.parametrize("table", QUOTA_TABLES)
def test_an_older_postgres_ledger_gains_the_table_and_keeps_verifying(table: str, postgres_url: str) -> None:
    postgres_database_gains(table, postgres_url, _count)
