"""``codemode serve --console`` for real: a run waits for an operator, whose answer the ledger binds."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from codemode.ledger import approval_digest, open_ledger

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
