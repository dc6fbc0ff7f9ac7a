"""The console shows an operator only the tenants of their token (``console_tenants``).

An operator of acme must not read globex's runs, calls or pending approvals, nor answer them,
nor learn from the pickers or a 404 that they exist; ``console_tenants = ["*"]`` sees them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.broker import ApprovalAnswer
from codemode.calls import RunBinding
from codemode.ledger import RunRecord, SqliteLedger, open_ledger
from codemode.serve.console._data import RunFilter, list_runs, run_detail
from codemode.serve.console._desk import ApprovalDesk, DeskApprover, DeskError
from codemode.serve.console._scope import ALL_TENANTS, TenantScope

from ._console_kit import (
    ACME_OPS,
    OPERATOR,
    Kit,
    console_kit,
    csrf_of,
    desk_on_ledger,
    request_for,
    until_pending,
)

pytestmark = pytest.mark.anyio

RUNS = [
    # (principal, tenant, status): oldest first
    ("alice", "acme", "ok"),
    ("carol", "globex", "timeout"),
    ("bob", "acme", "error"),
    ("dave", "initech", "ok"),
    ("carol", "globex", None),
]
ACME_RUNS = ["run_0000000000000002", "run_0000000000000000"]
GLOBEX_RUN = "run_0000000000000004"


def _run_id(n: int) -> str:
    return f"run_{n:016x}"


def _record(ledger: SqliteLedger) -> None:
    for n, (principal, tenant, status) in enumerate(RUNS):
        binding = RunBinding(run_id=_run_id(n), principal=principal, tenant=tenant, trace_id=f"{n:032x}")
        ledger.begin_run(binding, "0" * 64)
        if status is not None:
            ledger.finish_run(binding.run_id, status, {"calls": 0, "denials": 0, "duration_ms": 1.0})


def _shown(html: str) -> list[str]:
    return [part.split('"')[0] for part in html.split('<tr class="run" data-run="')[1:]]


# -- runs and the filter's pickers -----------------------------------------------------------------


async def test_an_operator_of_one_tenant_sees_only_its_runs_whatever_the_filter(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        _record(kit.ledger)
        cases = {
            "": ACME_RUNS,
            "principal=alice": [_run_id(0)],
            "principal=carol": [],
            "tenant=acme": ACME_RUNS,
            "tenant=globex": [],  # outside the scope: nothing, as for a tenant without runs
            "status=running": [],
            "limit=1": [_run_id(2)],
        }
        for query, expected in cases.items():
            page = await kit.client.get(f"/console/live?{query}", headers=ACME_OPS)
            assert page.status_code == 200, query
            assert _shown(page.text) == expected, query
            assert "globex" not in page.text and "carol" not in page.text, query
        everything = _shown((await kit.client.get("/console/live", headers=OPERATOR)).text)
        assert everything == [_run_id(n) for n in (4, 3, 2, 1, 0)], '["*"] sees every tenant, newest first'


async def test_the_pickers_offer_only_names_from_the_operators_tenants(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        _record(kit.ledger)
        scoped = (await kit.client.get("/console", headers=ACME_OPS)).text
        for choice in ("alice", "bob", "acme", "ok", "error"):
            assert f'<option value="{choice}"' in scoped, choice
        for hidden in ("carol", "dave", "globex", "initech", "timeout"):
            assert hidden not in scoped, hidden
        every = (await kit.client.get("/console", headers=OPERATOR)).text
        for choice in ("carol", "dave", "globex", "initech", "timeout"):
            assert f'<option value="{choice}"' in every, choice


def test_runs_of_several_tenants_are_listed_newest_first_within_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = open_ledger(tmp_path / "codemode.db")
    try:
        _record(ledger)
        two = TenantScope(frozenset({"acme", "globex"}))
        asked: list[tuple[str, ...] | None] = []
        list_of_ledger = ledger.list_runs

        def spy(**filters: Any) -> list[RunRecord]:
            asked.append(filters.get("tenants"))
            return list_of_ledger(**filters)

        monkeypatch.setattr(ledger, "list_runs", spy)
        found = list_runs(ledger, RunFilter(limit=3), two)
        assert asked == [("acme", "globex")], "one ledger query over the scope's tenants, not one each"
        assert [run.run_id for run in found.runs] == [_run_id(4), _run_id(2), _run_id(1)]
        assert found.principals == ["alice", "bob", "carol"] and found.tenants == ["acme", "globex"]
        assert "timeout" in found.statuses
        assert [r.run_id for r in list_runs(ledger, RunFilter(tenant="globex"), two).runs] == [
            _run_id(4),
            _run_id(1),
        ]
        assert list_runs(ledger, RunFilter(tenant="initech"), two).runs == []
        nothing = list_runs(ledger, RunFilter(), TenantScope(frozenset()))
        assert nothing.runs == [] and nothing.principals == [] and nothing.tenants == []
        assert nothing.statuses == ["error", "interrupted", "ok", "running"], "the known ones only"
        every = list_runs(ledger, RunFilter(), ALL_TENANTS)
        assert [r.run_id for r in every.runs] == [_run_id(n) for n in (4, 3, 2, 1, 0)]
        assert every.tenants == ["acme", "globex", "initech"]
        assert [r.run_id for r in list_runs(ledger, RunFilter(tenant="initech"), ALL_TENANTS).runs] == [
            _run_id(3)
        ]
        assert run_detail(ledger, GLOBEX_RUN, TenantScope(frozenset({"acme"}))) is None
        assert run_detail(ledger, GLOBEX_RUN, ALL_TENANTS) is not None
    finally:
        ledger.close()


# -- a run of another tenant is a missing run ------------------------------------------------------


async def test_another_tenants_run_is_a_404_exactly_like_a_missing_run(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        _record(kit.ledger)
        for suffix in ("", "/live"):
            own = await kit.client.get(f"/console/runs/{_run_id(0)}{suffix}", headers=ACME_OPS)
            assert own.status_code == 200, suffix
            other = await kit.client.get(f"/console/runs/{GLOBEX_RUN}{suffix}", headers=ACME_OPS)
            missing = await kit.client.get(f"/console/runs/run_ffffffffffffffff{suffix}", headers=ACME_OPS)
            assert other.status_code == missing.status_code == 404, suffix
            assert other.text.replace(GLOBEX_RUN, "X") == missing.text.replace("run_ffffffffffffffff", "X")
            assert "carol" not in other.text
            seen = await kit.client.get(f"/console/runs/{GLOBEX_RUN}{suffix}", headers=OPERATOR)
            assert seen.status_code == 200 and "carol@globex" in seen.text, suffix


# -- pending approvals -----------------------------------------------------------------------------

ACME_CALL = "run_00000000000000aa/0"
GLOBEX_CALL = "run_00000000000000bb/0"


async def _ask(desk: ApprovalDesk, call_id: str, tenant: str, answers: dict[str, ApprovalAnswer]) -> None:
    answers[call_id] = await DeskApprover(desk, None).ask(request_for(call_id, tenant=tenant))


async def _answer(kit: Kit, who: dict[str, str], call_id: str, digest: str) -> tuple[int, str]:
    csrf = csrf_of((await kit.client.get("/console", headers=who)).text)
    data = {"call_id": call_id, "args_digest": digest, "decision": "approve", "csrf_token": csrf}
    response = await kit.client.post("/console/approvals", data=data, headers=who)
    return response.status_code, response.text


async def test_pending_approvals_are_shown_and_answered_only_within_the_scope(tmp_path: Path) -> None:
    answers: dict[str, ApprovalAnswer] = {}
    async with console_kit(tmp_path) as kit, anyio.create_task_group() as tg:
        tg.start_soon(_ask, kit.desk, ACME_CALL, "acme", answers)
        tg.start_soon(_ask, kit.desk, GLOBEX_CALL, "globex", answers)
        await until_pending(kit.desk, 2)

        scoped = (await kit.client.get("/console/live", headers=ACME_OPS)).text
        assert ACME_CALL in scoped and GLOBEX_CALL not in scoped and "globex" not in scoped
        every = (await kit.client.get("/console/live", headers=OPERATOR)).text
        assert ACME_CALL in every and GLOBEX_CALL in every

        # Refused like a ticket that is not there, before the digest is even looked at (a 409
        # "out of date" would tell the operator that the call exists and waits).
        digest = request_for(GLOBEX_CALL).args_digest
        for presented in (digest, "sha256:" + "cd" * 32):
            status, text = await _answer(kit, ACME_OPS, GLOBEX_CALL, presented)
            assert status == 404 and f"no approval is pending for call {GLOBEX_CALL}" in text
        assert GLOBEX_CALL not in answers
        assert len(kit.desk.pending(ALL_TENANTS)) == 2, "the refused answer left the ticket open"

        status, _ = await _answer(kit, ACME_OPS, ACME_CALL, request_for(ACME_CALL).args_digest)
        assert status == 303
        status, _ = await _answer(kit, OPERATOR, GLOBEX_CALL, digest)
        assert status == 303
    assert answers == {
        ACME_CALL: ApprovalAnswer(True, "console:acme-ops"),
        GLOBEX_CALL: ApprovalAnswer(True, "console:ops"),
    }


async def test_the_desk_filters_by_the_tickets_tenant(tmp_path: Path) -> None:
    with desk_on_ledger(tmp_path) as desk:
        _filters_by_tenant(desk)


def _filters_by_tenant(desk: ApprovalDesk) -> None:
    desk.open(request_for(ACME_CALL, tenant="acme"))
    desk.open(request_for(GLOBEX_CALL, tenant="globex"))
    acme = TenantScope(frozenset({"acme"}))
    assert [t.request.call_id for t in desk.pending(acme)] == [ACME_CALL]
    assert {t.run_id for t in desk.pending(acme)} == {"run_00000000000000aa"}
    assert desk.pending(TenantScope(frozenset())) == [], "an identity without a scope sees nothing"
    assert len(desk.pending(ALL_TENANTS)) == 2
    with pytest.raises(DeskError) as refused:
        desk.answer(GLOBEX_CALL, "sha256:wrong", approve=True, operator="acme-ops", scope=acme)
    assert refused.value.status == 404


# -- the whole ledger, and the header --------------------------------------------------------------


async def test_ledger_verify_needs_an_operator_of_every_tenant(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        _record(kit.ledger)
        refused = await kit.client.get("/console/verify", headers=ACME_OPS)
        assert refused.status_code == 403
        text = refused.text.replace("&#34;", '"')
        assert "acme-ops sees only acme" in text and 'console_tenants = ["*"]' in text, text
        assert 'id="verdict"' not in refused.text
        allowed = await kit.client.get("/console/verify", headers=OPERATOR)
        assert allowed.status_code == 200 and 'id="verdict">ok:' in allowed.text


async def test_the_servers_page_needs_an_operator_of_every_tenant(tmp_path: Path) -> None:
    """Servers are shared: their errors and stderr may quote any tenant's data."""
    async with console_kit(tmp_path) as kit:
        refused = await kit.client.get("/console/servers", headers=ACME_OPS)
        assert refused.status_code == 403 and "the servers page covers every tenant" in refused.text
        assert (await kit.client.get("/console/servers", headers=OPERATOR)).status_code == 200


async def test_the_header_names_the_operators_tenants(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        scoped = (await kit.client.get("/console", headers=ACME_OPS)).text
        assert '<span id="tenants">acme</span>' in scoped
        assert "/console/verify" not in scoped, "no link to a page the operator may not open"
        assert "/console/servers" not in scoped
        every = (await kit.client.get("/console/servers", headers=OPERATOR)).text
        assert '<span id="tenants">every tenant</span>' in every and "/console/verify" in every
