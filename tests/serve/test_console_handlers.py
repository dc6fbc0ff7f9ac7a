"""The console's handlers in-process: who may open it, CSRF, answers bound to the request, filters."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from codemode.broker import ApprovalAnswer
from codemode.calls import RunBinding
from codemode.ledger import WindowLimit
from codemode.serve.console._data import FilterError, RunFilter
from codemode.serve.console._desk import ApprovalDesk, DeskApprover, DeskError
from codemode.serve.console._scope import ALL_TENANTS

from ._console_kit import (
    ALICE,
    OPERATOR,
    OPERATOR_TOKEN,
    ORIGIN,
    Kit,
    console_kit,
    csrf_of,
    desk_on_ledger,
    request_for,
    until_pending,
)

pytestmark = pytest.mark.anyio


# -- who may open it ------------------------------------------------------------------------------


async def test_without_credentials_a_page_sends_to_login_and_a_change_is_refused(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        page = await kit.client.get("/console")
        assert page.status_code == 303 and page.headers["location"] == "/console/login"
        change = await kit.client.post("/console/approvals", data={"call_id": "x"})
        assert change.status_code == 401 and "log in" in change.text


async def test_a_principal_without_the_operator_role_is_refused_with_what_to_do(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        for path in ("/console", "/console/live", "/console/servers", "/console/verify"):
            refused = await kit.client.get(path, headers=ALICE)
            assert refused.status_code == 403, path
            assert "alice is not an operator" in refused.text
            assert "roles = [&#34;operator&#34;]" in refused.text
        wrong = await kit.client.get("/console", headers={"Authorization": "Bearer not-a-token-0000000000"})
        assert wrong.status_code == 401 and "not one of [serve.tokens]" in wrong.text


async def test_an_operator_logs_in_once_and_keeps_a_strict_session_cookie(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        form = await kit.client.get("/console/login")
        nonce = form.text.split('name="nonce" value="')[1].split('"')[0]
        cookie = form.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie

        as_alice = await kit.client.post(
            "/console/login", data={"token": ALICE["Authorization"][7:], "nonce": nonce}
        )
        assert as_alice.status_code == 403 and "not an operator" in as_alice.text

        logged = await kit.client.post("/console/login", data={"token": OPERATOR_TOKEN, "nonce": nonce})
        assert logged.status_code == 303, logged.text
        session_cookie = logged.headers["set-cookie"].lower()
        assert "codemode_console=" in session_cookie and "samesite=strict" in session_cookie
        home = await kit.client.get("/console")
        assert home.status_code == 200 and '<b id="operator">ops</b>' in home.text

        logout = await kit.client.post("/console/logout", data={"csrf_token": csrf_of(home.text)})
        assert logout.status_code == 303
        kit.client.cookies.set("codemode_console", logged.cookies["codemode_console"], path="/console")
        ended = await kit.client.get("/console")
        assert ended.status_code == 401 and "session has ended" in ended.text


async def test_a_login_form_not_from_this_console_is_refused(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        no_nonce = await kit.client.post("/console/login", data={"token": OPERATOR_TOKEN})
        assert no_nonce.status_code == 403 and "did not come from this console" in no_nonce.text
        foreign = await kit.client.post(
            "/console/login", data={"token": OPERATOR_TOKEN}, headers={"Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403 and "Origin" in foreign.text


async def test_every_answer_carries_security_headers(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        for response in (
            await kit.client.get("/console", headers=OPERATOR),
            await kit.client.get("/console/login"),
        ):
            assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["cache-control"] == "no-store"


async def test_static_files_are_served_and_nothing_else(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        script = await kit.client.get("/console/static/console.js")
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
        assert "data-live" in script.text
        for name in ("..%2F_app.py", "_app.py", "missing.js"):
            assert (await kit.client.get(f"/console/static/{name}")).status_code == 404, name


# -- CSRF and Host/Origin -------------------------------------------------------------------------


async def _pending(kit: Kit) -> tuple[str, str]:
    """Open a ticket and read the CSRF token off the operator's page; (csrf, digest)."""
    page = await kit.client.get("/console", headers=OPERATOR)
    assert page.status_code == 200
    [ticket] = kit.desk.pending(ALL_TENANTS)
    assert ticket.request.call_id in page.text, "the page lists the pending approval"
    return csrf_of(page.text), ticket.request.args_digest


async def _answer(kit: Kit, decision: str, digest: str, csrf: str | None, **headers: str) -> tuple[int, str]:
    data = {"call_id": "run_0123456789abcdef/0", "args_digest": digest, "decision": decision}
    if csrf is not None:
        data["csrf_token"] = csrf
    response = await kit.client.post("/console/approvals", data=data, headers={**OPERATOR, **headers})
    return response.status_code, response.text


async def _asking(kit: Kit, answers: list[ApprovalAnswer]) -> None:
    answers.append(await DeskApprover(kit.desk, None).ask(request_for()))


@contextlib.asynccontextmanager
async def approval_waiting(tmp_path: Path) -> AsyncGenerator[tuple[Kit, str, str, list[ApprovalAnswer]]]:
    """A console with one approval waiting on its desk: the kit, the page's CSRF token, the
    request's digest, and the answers the waiting run gets (filled in when the block ends)."""
    answers: list[ApprovalAnswer] = []
    async with console_kit(tmp_path) as kit, anyio.create_task_group() as tg:
        tg.start_soon(_asking, kit, answers)
        await until_pending(kit.desk)
        csrf, digest = await _pending(kit)
        yield kit, csrf, digest, answers


async def test_a_change_without_the_csrf_token_or_from_another_origin_is_refused(tmp_path: Path) -> None:
    async with approval_waiting(tmp_path) as (kit, csrf, digest, answers):
        status, text = await _answer(kit, "approve", digest, None)
        assert status == 403 and "CSRF token" in text
        status, _ = await _answer(kit, "approve", digest, "forged-" + csrf)
        assert status == 403
        status, text = await _answer(kit, "approve", digest, csrf, Origin="http://evil.example")
        assert status == 403 and "Origin" in text
        status, _ = await _answer(kit, "approve", digest, csrf, Host="evil.example:8765")
        assert status == 421
        assert len(kit.desk.pending(ALL_TENANTS)) == 1 and not answers, "no refused request answered anything"

        status, _ = await _answer(kit, "approve", digest, csrf, Origin=ORIGIN)
        assert status == 303
        with anyio.fail_after(10):  # the waiting run reads the answer off its ticket
            while not answers:
                await anyio.sleep(0.01)
        assert not kit.desk.pending(ALL_TENANTS)
    assert answers == [ApprovalAnswer(True, "console:ops")]


async def test_the_csrf_token_also_works_as_a_header(tmp_path: Path) -> None:
    async with approval_waiting(tmp_path) as (kit, csrf, digest, answers):
        status, _ = await _answer(kit, "deny", digest, None, **{"X-CSRF-Token": csrf})
        assert status == 303
    assert answers[0].approved is False and "denied by operator ops" in answers[0].reason


# -- answers are bound to the request's argument digest and expiry -------------------------------------


async def test_an_answer_for_other_arguments_is_refused_and_the_request_stays_open(tmp_path: Path) -> None:
    async with approval_waiting(tmp_path) as (kit, csrf, digest, answers):
        status, text = await _answer(kit, "approve", "sha256:" + "cd" * 32, csrf)
        assert status == 409 and "your page is out of date" in text
        assert len(kit.desk.pending(ALL_TENANTS)) == 1 and not answers
        status, _ = await _answer(kit, "approve", digest, csrf)
        assert status == 303
        status, text = await _answer(kit, "approve", digest, csrf)
        assert status == 404 and "no approval is pending" in text, "an answer is taken once"
    assert answers == [ApprovalAnswer(True, "console:ops")]


async def test_an_expired_request_cannot_be_answered(tmp_path: Path) -> None:
    now = [time.time()]
    with desk_on_ledger(tmp_path, clock=lambda: now[0]) as desk:
        request = request_for(ttl=60)
        ticket = desk.open(request)
        now[0] += 61
        assert desk.pending(ALL_TENANTS) == [], "an expired request is not offered"
        with pytest.raises(DeskError) as refused:
            desk.answer(request.call_id, request.args_digest, approve=True, operator="ops", scope=ALL_TENANTS)
        assert refused.value.status == 410 and "expired" in str(refused.value)
        assert ticket.answer is None


async def test_nobody_answering_before_expiry_denies_the_call(tmp_path: Path) -> None:
    with desk_on_ledger(tmp_path) as desk:
        with anyio.fail_after(5):
            answer = await DeskApprover(desk, None).ask(request_for(ttl=0.2))
        assert answer.approved is False and "expired" in answer.reason
        assert desk.pending(ALL_TENANTS) == []


async def test_the_client_may_answer_first_and_withdraws_the_desk_ticket(tmp_path: Path) -> None:
    with desk_on_ledger(tmp_path) as desk:
        await _client_answers_first(desk)


async def _client_answers_first(desk: ApprovalDesk) -> None:

    class Client:
        async def ask(self, request: object) -> ApprovalAnswer:
            await anyio.sleep(0.05)
            return ApprovalAnswer(False, "mcp-client", "the user chose decline")

    answer = await DeskApprover(desk, Client()).ask(request_for())
    assert answer == ApprovalAnswer(False, "mcp-client", "the user chose decline")
    assert desk.pending(ALL_TENANTS) == []


async def test_the_console_may_answer_first_and_withdraws_the_client_question(tmp_path: Path) -> None:
    with desk_on_ledger(tmp_path) as desk:
        await _console_answers_first(desk)


async def _console_answers_first(desk: ApprovalDesk) -> None:
    withdrawn: list[bool] = []

    class Client:
        async def ask(self, request: object) -> ApprovalAnswer:
            try:
                await anyio.sleep_forever()
            finally:
                withdrawn.append(True)
            raise AssertionError("unreachable")

    request = request_for()
    answers: list[ApprovalAnswer] = []

    async def asking() -> None:
        answers.append(await DeskApprover(desk, Client()).ask(request))

    async with anyio.create_task_group() as tg:
        tg.start_soon(asking)
        await until_pending(desk)
        desk.answer(request.call_id, request.args_digest, approve=True, operator="ops", scope=ALL_TENANTS)
    assert answers == [ApprovalAnswer(True, "console:ops")] and withdrawn == [True]


# -- runs, filters, evidence, servers, verify ---------------------------------------------------------


def _runs(kit: Kit) -> None:
    for n, (principal, tenant, status) in enumerate(
        [("alice", "acme", "ok"), ("bob", "acme", "error"), ("alice", "globex", None)]
    ):
        binding = RunBinding(run_id=f"run_{n:016x}", principal=principal, tenant=tenant, trace_id=f"{n:032x}")
        kit.ledger.begin_run(binding, "0" * 64)
        if status is not None:
            kit.ledger.finish_run(binding.run_id, status, {"calls": n, "denials": 0, "duration_ms": 1.0})


def _shown(html: str) -> list[str]:
    return [part.split('"')[0] for part in html.split('<tr class="run" data-run="')[1:]]


async def test_a_run_refused_by_a_quota_is_listed_without_call_counts(tmp_path: Path) -> None:
    """A refused run's summary says only why (``{"refused": ...}``): it has no calls to count."""
    async with console_kit(tmp_path) as kit:
        binding = RunBinding(run_id=f"run_{'e' * 16}", principal="alice", tenant="acme", trace_id="f" * 32)
        none_left = WindowLimit(holder="principal", name="alice", measure="runs", window="minute", limit=0)
        refused = kit.ledger.quotas.begin_run(
            binding, "0" * 64, windows=[none_left], slots=[], slot_ttl_s=60.0
        )
        assert refused is not None
        page = await kit.client.get("/console/live", headers=OPERATOR)
        own = await kit.client.get(f"/console/runs/{binding.run_id}", headers=OPERATOR)
    assert page.status_code == 200, page.text
    assert f'data-run="{binding.run_id}" data-status="refused"' in page.text
    assert own.status_code == 200 and "refused" in own.text, own.text


async def test_runs_are_filtered_by_principal_tenant_status_and_time(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        _runs(kit)
        everything = _shown((await kit.client.get("/console/live", headers=OPERATOR)).text)
        assert everything == [f"run_{n:016x}" for n in (2, 1, 0)], "newest first"
        cases = {
            "principal=alice": [2, 0],
            "tenant=acme": [1, 0],
            "status=running": [2],
            "principal=alice&status=ok": [0],
            "principal=nobody": [],
            "limit=1": [2],
        }
        for query, expected in cases.items():
            page = await kit.client.get(f"/console/live?{query}", headers=OPERATOR)
            assert _shown(page.text) == [f"run_{n:016x}" for n in expected], query
        later = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
        earlier = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
        assert _shown((await kit.client.get(f"/console/live?since={later}", headers=OPERATOR)).text) == []
        assert (
            len(_shown((await kit.client.get(f"/console/live?since={earlier}", headers=OPERATOR)).text)) == 3
        )
        assert _shown((await kit.client.get(f"/console/live?until={earlier}", headers=OPERATOR)).text) == []
        index = await kit.client.get("/console?principal=alice", headers=OPERATOR)
        assert 'data-live="/console/live?principal=alice"' in index.text, "the poll keeps the filter"
        # The pickers offer every principal and tenant in the ledger, not only those shown.
        for choice in ("alice", "bob", "acme", "globex"):
            assert f'<option value="{choice}">' in index.text, choice
        for bad, expected in (
            ("since=yesterday", "since: 'yesterday'"),
            ("limit=0", "limit: '0'"),
            # Digits int() refuses, and moments with no UTC time: a 400 that says why, never a 500.
            ("limit=%C2%B2", "limit: '²'"),
            ("since=9999-12-31T23:59-01:00", "since: '9999-12-31T23:59-01:00'"),
            ("until=0001-01-01T00:00%2B01:00", "until: '0001-01-01T00:00+01:00'"),
        ):
            refused = await kit.client.get(f"/console?{bad}", headers=OPERATOR)
            assert refused.status_code == 400 and expected in refused.text.replace("&#39;", "'"), bad


def test_a_filter_reads_naive_times_as_utc_and_round_trips() -> None:
    parsed = RunFilter.parse({"since": "2026-01-02T03:04", "status": "ok", "limit": "7"})
    assert parsed.since == datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
    assert parsed.query() == {"status": "ok", "since": "2026-01-02T03:04", "limit": "7"}
    with pytest.raises(FilterError, match="whole number from 1 to 500"):
        RunFilter.parse({"limit": "9999"})


async def test_a_run_page_shows_each_call_with_its_evidence_chain(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        _runs(kit)
        page = await kit.client.get(f"/console/runs/run_{0:016x}", headers=OPERATOR)
        assert page.status_code == 200 and "No calls yet." in page.text
        assert f"codemode ledger show run_{0:016x} --evidence" in page.text
        missing = await kit.client.get("/console/runs/run_nope", headers=OPERATOR)
        assert missing.status_code == 404 and "no run 'run_nope'" in missing.text.replace("&#39;", "'")


async def test_servers_show_their_state_and_pin_drift(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        page = await kit.client.get("/console/servers", headers=OPERATOR)
    crm = page.text.split('data-server="crm"')[1].split("</tr>")[0]
    docs = page.text.split('data-server="docs"')[1].split("</tr>")[0]
    assert "crm/add_note (changed)" in crm and "codemode pin --diff" in crm
    assert 'data-state="failed"' in page.text and "connection refused" in docs and "none" in docs


async def test_verify_shows_the_ledger_check_and_its_head(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        _runs(kit)
        head_seq, head_hash = kit.ledger.head()
        page = await kit.client.get("/console/verify", headers=OPERATOR)
    assert 'id="verdict">ok:' in page.text
    assert f"--anchor {head_seq}:{head_hash}" in page.text
