"""``codemode run --plan`` from the command line, on the demo workspace's example servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codemode.config import load_config
from codemode.ledger import open_ledger
from tests._demo_workspace import make_workspace

CLI = [sys.executable, "-m", "codemode.cli"]

PROGRAM = """
from servers.crm import add_note, get_customer
get_customer(customer_id="CUST-0001")
add_note(customer_id="CUST-0001", text="planned from the cli")
add_note(customer_id="CUST-0001", text="planned from the cli")
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("plan-cli"), pool_size=0)


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}  # one table row per line
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=180, check=False, env=env
    )


@pytest.mark.integration
def test_run_plan_json_prints_the_plan_and_stores_it_without_writing(workspace: Path) -> None:
    args = ("run", "-", "--plan", "--json", "--no-input", "--config", str(workspace))
    completed = run_cli(*args, stdin=PROGRAM)
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    plan, run = data["plan"], data["run"]
    assert [(c["tool"], c["occurrence"], c["risk"]) for c in plan["calls"]] == [
        ("add_note", 0, "medium"),
        ("add_note", 1, "medium"),
    ]
    assert [r["tool"] for r in plan["reads"]] == ["get_customer"]
    assert run["status"] == "ok" and run["run_id"] == plan["run_id"]
    config = load_config(workspace)
    with open_ledger(config.ledger_location()) as ledger:
        stored = ledger.get_plan(plan["plan_id"])
        assert stored is not None and [dict(c) for c in stored.calls] == plan["calls"]
        sent = [(c.tool, c.state) for c in ledger.list_calls(run_id=plan["run_id"])]
    assert sent == [("get_customer", "succeeded")], "only the read reached a server"


@pytest.mark.integration
def test_run_plan_prints_a_table_of_the_planned_calls(workspace: Path) -> None:
    completed = run_cli("run", "-", "--plan", "--no-input", "--config", str(workspace), stdin=PROGRAM)
    assert completed.returncode == 0, completed.stderr
    rows = [line for line in completed.stdout.splitlines() if "crm/add_note" in line]
    assert len(rows) == 2 and all("medium" in row and "needed" in row for row in rows)
    assert "planned from the cli" in rows[0]
    assert "reads made: 1 (crm/get_customer)" in completed.stderr
    assert "2 planned calls" in completed.stderr and "plan plan_" in completed.stderr


@pytest.mark.integration
def test_approve_plan_then_run_with_plan_sends_the_planned_writes_without_asking(workspace: Path) -> None:
    config = str(workspace)
    planned = run_cli("run", "-", "--plan", "--json", "--no-input", "--config", config, stdin=PROGRAM)
    plan_id = json.loads(planned.stdout)["plan"]["plan_id"]

    unanswered = run_cli("approve", "--plan", plan_id, "--config", config)
    assert unanswered.returncode != 0
    assert "there is no terminal" in unanswered.stderr and f"--plan {plan_id} --yes" in unanswered.stderr
    approved = run_cli("approve", "--plan", plan_id, "--yes", "--config", config)
    assert approved.returncode == 0, approved.stderr
    assert 'add_note(customer_id="CUST-0001", text="planned from the cli")' in approved.stderr, "the code"
    assert approved.stdout.count("crm/add_note") == 2, "every planned call is shown"
    assert f"approved plan {plan_id} (2 planned calls)" in approved.stdout

    with_plan = ("run", "-", "--with-plan", plan_id, "--no-input", "--config", config)
    changed = run_cli(*with_plan, stdin=PROGRAM + " ")
    assert changed.returncode != 0 and "other code" in changed.stderr
    both = run_cli("run", "-", "--plan", "--with-plan", plan_id, "--config", config, stdin=PROGRAM)
    assert both.returncode == 2 and "give one of them" in both.stderr

    ran = run_cli(*with_plan, "--json", stdin=PROGRAM)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert (result["calls"], result["denials"], result["flags"]) == (3, 0, [])
    with open_ledger(load_config(workspace).ledger_location()) as ledger:
        sent = [(c.tool, c.state) for c in ledger.list_calls(run_id=result["run_id"], newest_first=False)]
    assert sent == [("get_customer", "succeeded"), ("add_note", "succeeded"), ("add_note", "succeeded")]

    revoked = run_cli("approve", "--plan", plan_id, "--revoke", "--config", config)
    assert revoked.returncode == 0, revoked.stderr
    refused = run_cli(*with_plan, stdin=PROGRAM)
    assert refused.returncode != 0 and "revoked" in refused.stderr
