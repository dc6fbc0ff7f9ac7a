"""Two real ``codemode serve --console`` replicas on one PostgreSQL ledger: a run on replica A
waits for approval, B's console lists the call and approves it over HTTP, and A's run completes,
its approval recorded and bound like any other."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from codemode.ledger import approval_digest, open_ledger
from tests.ledger._pg import PostgresServer

from ._background import BackgroundRun
from .conftest import OPERATOR_TOML, TOKENS, TOKENS_TOML, make_workspace, serving_http
from .test_console_serve import OPERATOR
from .test_serve import WRITE, text_of

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def shared_workspace(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[tuple[Path, str]]:
    """A workspace whose ledger is a PostgreSQL database of its own; (config, ledger URL)."""
    name = postgres_server.new_database()
    url = postgres_server.url(name)
    config = make_workspace(tmp_path, TOKENS_TOML + OPERATOR_TOML)
    config.write_text(config.read_text().replace("[ledger]\n", f'[ledger]\nurl = "{url}"\n', 1))
    yield config, url
    postgres_server.drop_database(name)


def _waiting(web: httpx.Client, console: str) -> dict[str, str]:
    """Poll a console's live fragment (as its page does) until a call waits; the answer form."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        html = web.get(f"{console}/live", headers=OPERATOR).text
        if 'class="ticket"' in html:
            return dict(re.findall(r'name="(csrf_token|call_id|args_digest)" value="([^"]*)"', html))
        time.sleep(0.2)
    raise AssertionError(f"no approval request reached {console}")


def _replica(mcp_url: str) -> str:
    # ServeConfig.replica_name's default: this host and the port the replica bound.
    return f"{socket.gethostname()}:{urlsplit(mcp_url).port}"


def test_a_run_waiting_on_one_replica_is_approved_on_the_others_console(
    shared_workspace: tuple[Path, str],
) -> None:
    config, ledger_url = shared_workspace
    with serving_http(config, "--console") as url_a, serving_http(config, "--console") as url_b:
        run = BackgroundRun(url_a, TOKENS["alice"], WRITE)
        console_b = url_b.removesuffix("/mcp") + "/console"
        with httpx.Client() as web:
            form = _waiting(web, console_b)  # listed by B although the run waits on A
            answered = web.post(
                f"{console_b}/approvals", data={**form, "decision": "approve"}, headers=OPERATOR
            )
            assert answered.status_code == 303, answered.text
            result = run.wait()
            assert not result.is_error, text_of(result)
            assert "rcpt_" in text_of(result)
            again = web.post(f"{console_b}/approvals", data={**form, "decision": "deny"}, headers=OPERATOR)
            assert again.status_code == 404 and "already answered by ops" in again.text
    with open_ledger(ledger_url, create=False, recover=False) as ledger:
        call = ledger.get_call(form["call_id"])
        assert call is not None and call.state == "succeeded" and call.approval_id is not None
        approval = ledger.get_approval(call.approval_id)
        ticket = ledger.approval_tickets.find(form["call_id"])
        assert ledger.verify().ok
    assert approval is not None and approval.approver == "console:ops"
    assert approval.used_by_call == call.call_id
    assert approval.args_digest == form["args_digest"] == approval_digest(call.args_digest, call.schema_hash)
    assert ticket is not None and ticket.state == "answered"
    assert (ticket.replica, ticket.answered_on) == (_replica(url_a), _replica(url_b))
