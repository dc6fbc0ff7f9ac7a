"""``codemode serve --console`` for real: a run waits for an operator, whose answer the ledger binds."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from codemode.ledger import approval_digest, open_ledger
from tests.skills._deployment import SKILL

from ._background import BackgroundRun
from .conftest import TOKENS
from .test_serve import WRITE, text_of

OPERATOR = {"Authorization": f"Bearer {TOKENS['ops']}"}
AUDITOR = {"Authorization": f"Bearer {TOKENS['audit']}"}


def _ticket(web: httpx.Client, console: str, timeout: float = 60.0) -> dict[str, str]:
    """Poll the live fragment (as the page's script does) until an approval waits; its form."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        html = web.get(f"{console}/live", headers=OPERATOR).text
        if 'class="ticket"' in html:
            fields = dict(re.findall(r'name="(csrf_token|call_id|args_digest)" value="([^"]*)"', html))
            assert len(fields) == 3, html
            return fields
        time.sleep(0.2)
    raise AssertionError("no approval request reached the console")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_an_operator_approves_a_waiting_run_and_the_ledger_binds_the_approval(
    console_url: str, console_workspace: Path, mode: str
) -> None:
    run = BackgroundRun(console_url.removesuffix("/console") + "/mcp", TOKENS["alice"], WRITE, mode)
    with httpx.Client() as web:
        form = _ticket(web, console_url)
        run_id = form["call_id"].rsplit("/", 1)[0]
        waiting = web.get(f"{console_url}/live", headers=OPERATOR).text
        assert f'data-run="{run_id}" data-status="waiting"' in waiting, "the run shows it waits"
        answered = web.post(
            f"{console_url}/approvals", data={**form, "decision": "approve"}, headers=OPERATOR
        )
        assert answered.status_code == 303, answered.text
    result = run.wait()
    assert not result.is_error, text_of(result)
    assert "rcpt_" in text_of(result)

    ledger = open_ledger(console_workspace.with_name("codemode.db"), create=False, recover=False)
    try:
        call = ledger.get_call(form["call_id"])
        assert call is not None and call.state == "succeeded" and call.approval_id is not None
        approval = ledger.get_approval(call.approval_id)
    finally:
        ledger.close()
    assert approval is not None
    assert approval.approver == "console:ops"
    assert approval.call_id == call.call_id and approval.used_by_call == call.call_id
    assert approval.args_digest == form["args_digest"] == approval_digest(call.args_digest, call.schema_hash)
    assert approval.expires_at > approval.issued_at


def test_an_operator_denial_reaches_the_program_as_call_denied(console_url: str) -> None:
    run = BackgroundRun(console_url.removesuffix("/console") + "/mcp", TOKENS["alice"], WRITE)
    with httpx.Client() as web:
        form = _ticket(web, console_url)
        web.post(f"{console_url}/approvals", data={**form, "decision": "deny"}, headers=OPERATOR)
    result = run.wait()
    assert result.is_error
    assert "CallDenied" in text_of(result) and "denied by operator ops in the console" in text_of(result)


def test_the_mcp_endpoint_still_wants_its_bearer_token_beside_the_console(console_url: str) -> None:
    base = console_url.removesuffix("/console")
    with httpx.Client() as web:
        assert web.post(f"{base}/mcp", json={}).status_code == 401
        assert web.get(console_url, headers={"Authorization": f"Bearer {TOKENS['bob']}"}).status_code == 403
        assert web.get(console_url, headers=OPERATOR).status_code == 200
        # Servers and verify cover every tenant: ops sees acme only, audit has console_tenants = ["*"].
        assert web.get(f"{console_url}/servers", headers=OPERATOR).status_code == 403
        assert web.get(f"{console_url}/servers", headers=AUDITOR).text.count('data-state="ready"') == 3
        assert web.get(f"{console_url}/verify", headers=OPERATOR).status_code == 403
        assert 'id="verdict">ok:' in web.get(f"{console_url}/verify", headers=AUDITOR).text


PLANNED = """
from servers.crm import add_note, get_customer
get_customer(customer_id="CUST-0001")
add_note(customer_id="CUST-0001", text="<script>alert('plan')</script> from the console test")
"""


def _cli(config: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "codemode.cli", *args, "--json", "--config", str(config)]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.integration
def test_a_plan_approved_in_the_console_runs_with_the_plan_without_asking(
    console_url: str, console_workspace: Path
) -> None:
    planned = _cli(console_workspace, "run", "-", "--plan", "--no-input", stdin=PLANNED)
    assert planned.returncode == 0, planned.stderr
    plan_id = json.loads(planned.stdout)["plan"]["plan_id"]
    with httpx.Client() as web:
        # The dry run ran as the default principal, in tenant "default": ops sees acme only.
        assert web.get(f"{console_url}/plans/{plan_id}", headers=OPERATOR).status_code == 404
        page = web.get(f"{console_url}/plans/{plan_id}", headers=AUDITOR).text
        assert "crm/add_note" in page and "crm/get_customer" in page and "<script>alert" not in page
        form = dict(re.findall(r'name="(csrf_token|plan_id|digest)" value="([^"]*)"', page))
        answered = web.post(
            f"{console_url}/plans/answer", data={**form, "ttl": "10m", "decision": "approve"}, headers=AUDITOR
        )
        assert answered.status_code == 303, answered.text
    # --no-input: a call outside an approved plan would be refused; this one is in it.
    real = _cli(console_workspace, "run", "-", "--with-plan", plan_id, "--no-input", stdin=PLANNED)
    assert real.returncode == 0, real.stderr + real.stdout
    ledger = open_ledger(console_workspace.with_name("codemode.db"), create=False, recover=False)
    try:
        plan = ledger.get_plan(plan_id)
        run_id = json.loads(real.stdout)["run_id"]
        sent = [(c.tool, c.state) for c in ledger.list_calls(run_id=run_id)]
    finally:
        ledger.close()
    assert plan is not None and plan.approved_by == "console:audit"
    assert sorted(sent) == [("add_note", "succeeded"), ("get_customer", "succeeded")]


@pytest.mark.integration
def test_an_operator_revokes_a_skill_on_a_running_server(
    console_url: str, console_workspace: Path, tmp_path: Path
) -> None:
    source = tmp_path / "customers.py"
    source.write_text(SKILL, encoding="utf-8")
    added = _cli(console_workspace, "skill", "add", "customers", str(source), "--tenant", "acme")
    assert added.returncode == 0, added.stderr
    with httpx.Client() as web:
        listed = web.get(f"{console_url}/skills", headers=OPERATOR).text
        # Judged against the running engine's approved tools: as `skill add` pinned it, not stale.
        assert 'data-skill="customers" data-version="1" data-state="approved"' in listed
        page = web.get(f"{console_url}/skill?tenant=acme&name=customers", headers=OPERATOR).text
        csrf = dict(re.findall(r'name="(csrf_token)" value="([^"]*)"', page))
        revoked = web.post(
            f"{console_url}/skills/answer",
            data={**csrf, "tenant": "acme", "name": "customers", "decision": "revoke"},
            headers=OPERATOR,
        )
        assert revoked.status_code == 303, revoked.text
    assert json.loads(_cli(console_workspace, "skill", "list", "--tenant", "acme").stdout) == []
