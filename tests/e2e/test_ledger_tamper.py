"""``codemode ledger verify`` on a ledger written by real runs: clean, then tampered with."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

Deploy = Any  # the ``deploy`` fixture (tests/e2e/conftest.py)

PAYMENT = {"customer_id": "CUST-0001", "amount_cents": 1200, "reference": "INV-9", "currency": "USD"}
PROGRAM = f"""
import codemode_runtime as rt
from servers.crm import get_customer, add_note, record_payment
get_customer(customer_id="CUST-0001")
first = add_note(customer_id="CUST-0001", text="verified", _idempotency_key="note-1")
again = add_note(customer_id="CUST-0001", text="verified", _idempotency_key="note-1")
paid = record_payment(**{PAYMENT!r})
try:
    record_payment(**{PAYMENT!r})
except rt.CallDenied:
    pass
[first["receipt_id"], again["receipt_id"], paid["receipt_id"]]
"""

# Each tampering, as SQL run on a copy of the ledger. The events table refuses UPDATE and
# DELETE through triggers; whoever tampers with the file drops them first.
TAMPERING: dict[str, tuple[str, set[str]]] = {
    "edit a call row": (
        "UPDATE calls SET receipt = 'rcpt_999999' WHERE receipt IS NOT NULL",
        {"row_edited"},
    ),
    "delete a call row": ("DELETE FROM calls WHERE state = 'denied'", {"row_missing"}),
    "edit an event": (
        "DROP TRIGGER events_append_only_update;"
        "UPDATE events SET payload = replace(payload, 'verified', 'forged') "
        "WHERE seq = (SELECT min(seq) FROM events WHERE payload LIKE '%verified%')",
        {"event_edited"},
    ),
    "delete an event": (
        "DROP TRIGGER events_append_only_delete;"
        "DELETE FROM events WHERE seq = (SELECT min(seq) FROM events WHERE kind = 'call_replayed')",
        {"event_missing"},
    ),
    "edit a row and delete one": (
        "UPDATE calls SET state = 'failed' WHERE state = 'succeeded' AND tool = 'add_note';"
        "DELETE FROM approvals",
        {"row_edited", "row_missing"},
    ),
}


def tampered_copy(source: Path, destination: Path, sql: str) -> Path:
    destination.mkdir()
    shutil.copyfile(source / "codemode.toml", destination / "codemode.toml")
    shutil.copyfile(source / "codemode.db", destination / "codemode.db")
    with contextlib.closing(sqlite3.connect(destination / "codemode.db")) as conn:
        conn.executescript(sql)
        conn.commit()
    return destination / "codemode.toml"


def verify(config: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    from click.testing import CliRunner

    from codemode.cli._main import cli

    result = CliRunner().invoke(cli, ["ledger", "verify", "--config", str(config), "--json", *extra])
    return result.exit_code, json.loads(result.stdout)


def deployment_cli_text(config: Path) -> str:
    from click.testing import CliRunner

    from codemode.cli._main import cli

    return CliRunner().invoke(cli, ["ledger", "verify", "--config", str(config)]).output


async def test_ledger_verify_passes_on_real_runs_and_fails_on_each_kind_of_tampering(
    deploy: Deploy, tmp_path: Path
) -> None:
    deployment = deploy(policy={"consent": {"never": ["crm/add_note"]}})
    approved = deployment.cli("approve", "crm/record_payment", "--args", json.dumps(PAYMENT))
    assert approved.exit_code == 0, approved.output
    async with deployment.engine() as engine:
        result = await engine.run(PROGRAM)
        second = await engine.run("from servers.crm import list_customers\nlist_customers(limit=2)['total']")
    assert result.status == "ok", result.error
    first, again, paid = result.result  # type: ignore[misc]
    assert first == again != paid and second.result == 500
    assert deployment.crm_write_count() == 2

    code, report = verify(deployment.config_path)
    assert (code, report["ok"], report["problems"]) == (0, True, []), report
    assert report["events"] > 10
    anchor = f"{report['head_seq']}:{report['head_hash']}"
    assert verify(deployment.config_path, "--anchor", anchor)[0] == 0

    for name, (sql, expected) in TAMPERING.items():
        config = tampered_copy(deployment.root, tmp_path / name.replace(" ", "-"), sql)
        code, report = verify(config)
        assert code == 1 and report["ok"] is False, (name, report)
        kinds = {p["kind"] for p in report["problems"]}
        assert expected <= kinds, (name, report["problems"])
        human = deployment_cli_text(config)
        assert "FAILED verification" in human, human

    # The clean ledger still verifies: the copies were tampered with, not the original.
    assert verify(deployment.config_path)[0] == 0
