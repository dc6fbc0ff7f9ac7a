"""Two ``codemode serve`` replicas on one PostgreSQL ledger behind HAProxy (``deploy/haproxy.cfg``,
bound to 127.0.0.1), as ``deploy/`` runs them: calls spread over both, a quota counted across
both, an approval asked on one and given on the other's console, a replica killed mid-call
whose call the other side settles as ``unknown``, and a ledger that verifies afterwards.

The tests run in this order on one deployment; the last one kills replica A.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import anyio
import httpx
import mcp_types
import pytest
from mcp import Client

from codemode.ledger import open_ledger
from tests.ledger._pg import PostgresServer

from ._background import BackgroundRun
from ._haproxy import haproxy_binary, running_haproxy
from ._replicas import RUNS_PER_MINUTE, TOKENS, Deployment, two_replicas
from .test_serve import WRITE, http, text_of

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.slow]

SESSIONS = 8
CALLS_PER_SESSION = 25
READ = """
from servers.crm import get_customer
customer = get_customer(customer_id="CUST-0001")
print("read", customer["customer_id"] if isinstance(customer, dict) else customer)
"""
HANG = """
from servers.slowcrm import add_note
add_note(customer_id="CUST-0002", text="sent, never answered")
"""
OPERATOR = {"Authorization": f"Bearer {TOKENS['ops']}"}


class Deployed:
    def __init__(self, deployment: Deployment, balancer: str) -> None:
        self.deployment = deployment
        self.balancer = balancer
        self.a = deployment.replicas["serve-a"]
        self.b = deployment.replicas["serve-b"]

    @property
    def mcp(self) -> str:
        return f"{self.balancer}/mcp"

    def ledger_runs(self, principal: str) -> list[tuple[str, str, str | None]]:
        """``(run_id, status, owner)`` of every run of ``principal``."""
        ledger = open_ledger(self.deployment.ledger_url, create=False, recover=False)
        try:
            runs = ledger.list_runs(principal=principal, limit=100_000)
        finally:
            ledger.close()
        return [(run.run_id, run.status, run.owner) for run in runs]

    def replica_of(self, owner: str | None) -> str:
        """Which replica a ledger owner (``host:pid:started:nonce``) is: by its process id."""
        pid = int((owner or "::").rsplit(":", 3)[1] or 0)
        return next((r.name for r in (self.a, self.b) if r.process.pid == pid), f"pid {pid}")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer) -> Iterator[Deployed]:
    haproxy_binary()  # skip (or fail in CI) before starting anything
    directory = tmp_path_factory.mktemp("replicas")
    with two_replicas(directory, postgres_server) as deployment:
        ports = {name: replica.port for name, replica in deployment.replicas.items()}
        with running_haproxy(directory, ports) as balancer:
            yield Deployed(deployment, balancer)


async def _call(url: str, principal: str, code: str) -> mcp_types.CallToolResult:
    async with Client(http(url, TOKENS[principal]), mode="legacy") as client:
        return await client.call_tool("run_code", {"code": code})


def call(url: str, principal: str, code: str = "1 + 1") -> mcp_types.CallToolResult:
    """One ``run_code`` in an MCP session of its own (2025-11-25: the run answers its request)."""
    return anyio.run(_call, url, principal, code)


async def _sessions(url: str, sessions: int, calls: int) -> list[mcp_types.CallToolResult]:
    results: list[mcp_types.CallToolResult] = []

    async def one_session() -> None:
        async with Client(http(url, TOKENS["alice"]), mode="legacy") as client:
            for _ in range(calls):
                results.append(await client.call_tool("run_code", {"code": READ}))

    async with anyio.create_task_group() as group:
        for _ in range(sessions):
            group.start_soon(one_session)
    return results


def test_runs_through_the_balancer_are_spread_over_both_replicas(deployed: Deployed) -> None:
    started = time.monotonic()
    results = anyio.run(_sessions, deployed.mcp, SESSIONS, CALLS_PER_SESSION)
    elapsed = time.monotonic() - started
    total = SESSIONS * CALLS_PER_SESSION
    rate = total / elapsed
    print(
        f"{total} run_code calls in {SESSIONS} sessions through haproxy: {elapsed:.1f} s, {rate:.1f} runs/s"
    )
    failed = [text_of(result) for result in results if result.is_error]
    assert len(results) == total and not failed, failed[:3]
    assert all("read CUST-0001" in text_of(result) for result in results), text_of(results[0])

    runs = deployed.ledger_runs("alice")
    assert Counter(status for _, status, _ in runs) == {"ok": total}
    per_replica = Counter(deployed.replica_of(owner) for _, _, owner in runs)
    assert set(per_replica) == {"serve-a", "serve-b"}, per_replica
    assert sum(per_replica.values()) == total


def _refusal(result: mcp_types.CallToolResult) -> dict[str, object]:
    assert result.is_error, f"not refused: {text_of(result)}"
    assert result.structured_content is not None, text_of(result)
    return result.structured_content


def _minute() -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0)


def _left_in_minute() -> float:
    return (_minute() + timedelta(minutes=1) - datetime.now(UTC)).total_seconds()


def _unless_the_minute_turns_soon() -> None:
    """Start the quota's runs early in a UTC minute: the whole step then fits in one window."""
    left = _left_in_minute()
    if left < 15:
        time.sleep(left + 0.1)


def test_a_principal_over_its_minute_quota_is_refused_by_either_replica(deployed: Deployed) -> None:
    for _ in range(3):
        _unless_the_minute_turns_soon()
        minute = _minute()
        # The count is the shared ledger's: runs on A and on B use up one quota together.
        allowed = [call(url, "bob") for url in (deployed.a.mcp, deployed.b.mcp, deployed.a.mcp)]
        assert len(allowed) == RUNS_PER_MINUTE
        refused = {
            "serve-a": call(deployed.a.mcp, "bob"),
            "serve-b": call(deployed.b.mcp, "bob"),
            "haproxy": call(deployed.mcp, "bob"),
        }
        if _minute() == minute:
            break
        # The fixed UTC minute turned meanwhile, so its count started afresh part way: again, from
        # the start of the next minute (this one may hold some of the runs above already).
        time.sleep(_left_in_minute() + 0.1)
    else:
        pytest.fail("the UTC minute turned during each of three attempts")
    assert not any(result.is_error for result in allowed), [text_of(r) for r in allowed]
    for where, result in refused.items():
        refusal = _refusal(result)
        assert refusal["error"] == "quota_exceeded" and refusal["status"] == "refused", where
        quota = (refusal["quota"], refusal["holder"], refusal["name"])
        assert quota == ("runs_per_minute", "principal", "bob"), where
        assert (refusal["limit"], refusal["used"]) == (RUNS_PER_MINUTE, RUNS_PER_MINUTE), where
        retry_after = refusal["retry_after_s"]
        assert isinstance(retry_after, int) and 0 < retry_after <= 60, (where, retry_after)
        assert str(refusal["retry_at"]).endswith("Z") and "retry after" in text_of(result), where


def _ticket(web: httpx.Client, console: str, timeout: float = 30.0) -> dict[str, str]:
    """Poll a console's live fragment until an approval waits there; its form's fields."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        html = web.get(f"{console}/live", headers=OPERATOR).text
        if 'class="ticket"' in html:
            fields = dict(re.findall(r'name="(csrf_token|call_id|args_digest)" value="([^"]*)"', html))
            assert len(fields) == 3, html
            return fields
        time.sleep(0.2)
    html = web.get(f"{console}/live", headers=OPERATOR).text
    raise AssertionError(f"no approval request reached the console at {console}:\n{html}")


def test_a_call_waiting_on_replica_a_is_approved_on_replica_b_console(deployed: Deployed) -> None:
    run = BackgroundRun(deployed.a.mcp, TOKENS["alice"], WRITE, "legacy")
    with httpx.Client() as web:
        form = _ticket(web, deployed.b.console)
        answered = web.post(
            f"{deployed.b.console}/approvals", data={**form, "decision": "approve"}, headers=OPERATOR
        )
        assert answered.status_code == 303, answered.text
    result = run.wait()
    assert not result.is_error, text_of(result)
    assert "rcpt_" in text_of(result)
    ledger = open_ledger(deployed.deployment.ledger_url, create=False, recover=False)
    try:
        call_record = ledger.get_call(form["call_id"])
        assert call_record is not None and call_record.state == "succeeded"
        assert call_record.approval_id is not None
        approval = ledger.get_approval(call_record.approval_id)
        run_record = ledger.get_run(call_record.run_id)
        ticket = ledger.approval_tickets.find(call_record.call_id)
    finally:
        ledger.close()
    assert approval is not None and approval.approver == "console:ops"
    assert run_record is not None and deployed.replica_of(run_record.owner) == "serve-a", "asked on A"
    # The shared ticket names both replicas by their [serve] replica names.
    assert ticket is not None and (ticket.replica, ticket.answered_on) == ("serve-a", "serve-b")
    assert (ticket.state, ticket.approved, ticket.answered_by) == ("answered", True, "ops"), ticket


def _sent_call(deployed: Deployed, server: str, timeout: float = 60.0) -> str:
    """The id of the first call to ``server`` once the ledger records it sent."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ledger = open_ledger(deployed.deployment.ledger_url, create=False, recover=False)
        try:
            sent = [c.call_id for c in ledger.list_calls(state="sent", limit=1000) if c.server == server]
        finally:
            ledger.close()
        if sent:
            return sent[0]
        time.sleep(0.2)
    raise AssertionError(f"no call to {server} was sent")


def test_a_replica_killed_mid_call_leaves_it_unknown_never_sent_again_and_the_ledger_verifies(
    deployed: Deployed,
) -> None:
    run = BackgroundRun(deployed.a.mcp, TOKENS["alice"], HANG, "legacy")
    call_id = _sent_call(deployed, "slowcrm")
    deployed.a.sigkill()
    with pytest.raises(BaseException):  # whichever way the client learns that its connection died
        run.wait()

    # B goes on serving. (Through the balancer a new session may still be sent to A until its
    # health checks find it down: deploy/haproxy.cfg has no redispatch.)
    assert not call(deployed.b.mcp, "alice").is_error
    # The operator's reconcile on B's configuration reads the shared ledger: the call is unknown.
    reconcile = deployed.deployment.cli("ledger", "reconcile", "--json")
    assert reconcile.returncode == 0, reconcile.stderr
    listed = json.loads(reconcile.stdout)
    assert call_id in json.dumps(listed), listed
    with httpx.Client() as web:
        run_id = call_id.rsplit("/", 1)[0]
        page = web.get(f"{deployed.b.console}/runs/{run_id}/live", headers=OPERATOR).text
    assert f'data-call="{call_id}" data-state="unknown"' in page, page
    ledger = open_ledger(deployed.deployment.ledger_url, create=False, recover=False)
    try:
        record = ledger.get_call(call_id)
        kinds = [event.kind for event in ledger.events(call_id)]
        run_record = ledger.get_run(run_id)
    finally:
        ledger.close()
    assert record is not None and record.state == "unknown"
    assert "reconcile it, never retry it blindly" in (record.reason or "")
    assert kinds.count("call_sent") == 1 and kinds[-1] == "call_unknown", kinds
    assert run_record is not None and run_record.status == "interrupted"

    verified = deployed.deployment.cli("ledger", "verify", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
