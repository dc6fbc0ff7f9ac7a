"""Plans in the console: the list and one plan whole (the program, its code digest, every planned
call with its risk, argument digest and arguments as safe text, and the reads it made), and the
operator's approval, which is ``codemode approve --plan``'s: the ledger's ``approve_plan``, bound
to the digest the page showed, with an expiry and the operator as approver. Another tenant's
operator neither sees nor answers a plan, and a plan's hostile text is shown, never run."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from codemode.broker import PlannedCall
from codemode.engine import Plan
from codemode.ledger import PlanRecord, SqliteLedger, plan_digest

from ._console_kit import ACME_OPS, GLOBEX_OPS, OPERATOR, Kit, console_kit, csrf_of

pytestmark = pytest.mark.anyio

HOSTILE_NOTE = "<script>alert('plan')</script>\u202etxt.exe"
HOSTILE_CODE = (
    "from servers.crm import add_note\nadd_note(customer_id='C-1', text=\"</pre><script>x()</script>\")\n"
)


def _record(
    ledger: SqliteLedger, plan_id: str, tenant: str, *, ttl: timedelta = timedelta(hours=1)
) -> PlanRecord:
    now = datetime.now(UTC)
    calls = (
        PlannedCall(
            index=0,
            server="crm",
            tool="add_note",
            arguments={"customer_id": "C-1", "text": HOSTILE_NOTE},
            args_digest="sha256:" + "a1" * 32,
            occurrence=0,
            risk="medium",
            decisions=("consent: needs approval (crm/add_note is medium risk)",),
        ),
        PlannedCall(
            index=1,
            server="crm",
            tool="link_note",
            arguments={"note": "<planned call #0>"},
            args_digest="sha256:" + "b2" * 32,
            occurrence=0,
            risk="high",
            decisions=(),
            references=(0,),
        ),
    )
    return ledger.record_plan(
        PlanRecord(
            plan_id=plan_id,
            run_id=f"run_{plan_id}",
            principal="alice",
            tenant=tenant,
            code_digest="c0" * 32,
            code=HOSTILE_CODE,
            calls=tuple(call.as_json() for call in calls),
            reads=({"server": "crm", "tool": "get_customer", "args_digest": "sha256:" + "d3" * 32},),
            created_at=now - timedelta(minutes=1),
            expires_at=now + ttl,
        )
    )


def _stored(ledger: SqliteLedger, plan_id: str) -> PlanRecord:
    found = ledger.get_plan(plan_id)
    assert found is not None, plan_id
    return found


async def _csrf(kit: Kit, who: dict[str, str]) -> str:
    return csrf_of((await kit.client.get("/console/plans", headers=who)).text)


async def _answer(
    kit: Kit, who: dict[str, str], plan_id: str, decision: str, **extra: str
) -> tuple[int, str]:
    data = {"plan_id": plan_id, "decision": decision, "csrf_token": await _csrf(kit, who), **extra}
    response = await kit.client.post("/console/plans/answer", data=data, headers=who)
    return response.status_code, response.headers.get("location", response.text)


def _listed(page: str) -> list[str]:
    return [part.split('"')[0] for part in page.split('<tr class="plan" data-plan="')[1:]]


async def test_the_plan_page_shows_the_program_every_planned_call_and_the_reads_as_safe_text(
    tmp_path: Path,
) -> None:
    async with console_kit(tmp_path) as kit:
        record = _record(kit.ledger, "plan_acme0000000001", "acme")
        page = await kit.client.get("/console/plans/plan_acme0000000001", headers=ACME_OPS)
        assert page.status_code == 200
        text = page.text
        plan = Plan.from_record(record)
        assert f"sha256:{'c0' * 32}" in text and plan.digest in text, (
            "the code digest and what approval binds"
        )
        for shown in ("crm/add_note", "crm/link_note", "risk-medium", "risk-high", "a1" * 32, "b2" * 32):
            assert shown in text, shown
        assert "crm/get_customer" in text and "d3" * 32 in text, "the reads it made"
        assert "consent: needs approval" in text and "uses the results of #0" in text
        # The program and the arguments are the program's text: escaped, never markup.
        assert "<script>" not in text and "</pre><script>" not in text
        assert html.escape("<script>alert('plan')</script>", quote=False) in text.replace("&#39;", "'")
        assert "\u202e" not in text and "\\u202e" in text, "a right-to-left override is shown escaped"
        assert html.escape("</pre><script>x()</script>", quote=False) in text


async def test_an_operator_approves_a_plan_bound_to_what_the_page_showed(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        record = _record(kit.ledger, "plan_acme0000000001", "acme")
        digest = Plan.from_record(record).digest
        listed = (await kit.client.get("/console/plans?state=pending", headers=ACME_OPS)).text
        assert _listed(listed) == ["plan_acme0000000001"]

        stale = await _answer(
            kit, ACME_OPS, record.plan_id, "approve", digest="sha256:" + "0" * 64, ttl="10m"
        )
        assert stale[0] == 409 and "not the plan that was shown" in html.unescape(stale[1])
        assert _stored(kit.ledger, record.plan_id).approved_at is None
        forged = await kit.client.post(
            "/console/plans/answer",
            data={"plan_id": record.plan_id, "decision": "approve", "digest": digest, "ttl": "10m"},
            headers=ACME_OPS,
        )
        assert forged.status_code == 403 and "CSRF" in forged.text, "no CSRF token: refused"

        before = datetime.now(UTC)
        status, location = await _answer(kit, ACME_OPS, record.plan_id, "approve", digest=digest, ttl="10m")
        assert (status, location) == (303, "/console/plans/plan_acme0000000001?done=approved")
        approved = kit.ledger.get_plan(record.plan_id)
        assert approved is not None and approved.approval_expires_at is not None
        assert approved.approved_by == "console:acme-ops"
        # What `run --with-plan` checks: the approval binds this code and these calls.
        assert approved.approved_digest == plan_digest(approved.code_digest, approved.calls) == digest
        assert (
            before + timedelta(minutes=10)
            <= approved.approval_expires_at
            <= datetime.now(UTC) + timedelta(minutes=10)
        )
        assert "plan_approved" in [event.kind for event in kit.ledger.events()]
        shown = (await kit.client.get(location, headers=ACME_OPS)).text
        assert 'id="plan-state">approved<' in shown and "console:acme-ops" in shown and 'id="notice"' in shown
        again = await _answer(kit, ACME_OPS, record.plan_id, "approve", digest=digest, ttl="10m")
        assert again[0] == 409 and "approved already" in again[1]
        assert kit.ledger.verify().ok


async def test_a_plan_is_rejected_and_expired_plans_are_listed_as_expired(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        _record(kit.ledger, "plan_acme0000000001", "acme")
        _record(kit.ledger, "plan_acme0000000002", "acme", ttl=timedelta(microseconds=1))
        status, _ = await _answer(kit, ACME_OPS, "plan_acme0000000001", "revoke")
        assert status == 303
        assert _stored(kit.ledger, "plan_acme0000000001").revoked_at is not None
        states = {
            state: _listed((await kit.client.get(f"/console/plans?state={state}", headers=ACME_OPS)).text)
            for state in ("pending", "approved", "expired", "revoked")
        }
        assert states == {
            "pending": [],
            "approved": [],
            "expired": ["plan_acme0000000002"],
            "revoked": ["plan_acme0000000001"],
        }
        late = await _answer(
            kit,
            ACME_OPS,
            "plan_acme0000000002",
            "approve",
            digest=Plan.from_record(_stored(kit.ledger, "plan_acme0000000002")).digest,
            ttl="10m",
        )
        assert late[0] == 409 and "expired" in late[1]
        bad = await kit.client.get("/console/plans?state=everything", headers=ACME_OPS)
        assert bad.status_code == 400 and "pending" in bad.text


async def test_another_tenants_operator_neither_sees_nor_answers_a_plan(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        globex = _record(kit.ledger, "plan_globex00000001", "globex")
        _record(kit.ledger, "plan_acme0000000001", "acme")
        digest = Plan.from_record(globex).digest
        assert _listed((await kit.client.get("/console/plans", headers=ACME_OPS)).text) == [
            "plan_acme0000000001"
        ]
        assert _listed((await kit.client.get("/console/plans", headers=GLOBEX_OPS)).text) == [
            "plan_globex00000001"
        ]
        assert sorted(_listed((await kit.client.get("/console/plans", headers=OPERATOR)).text)) == [
            "plan_acme0000000001",
            "plan_globex00000001",
        ]
        hidden = await kit.client.get("/console/plans/plan_globex00000001", headers=ACME_OPS)
        missing = await kit.client.get("/console/plans/plan_nobody", headers=ACME_OPS)
        assert hidden.status_code == missing.status_code == 404
        told = hidden.text.replace("plan_globex00000001", "X")
        assert "globex" not in told and "alice" not in told
        assert hidden.text.replace("plan_globex00000001", "X") == missing.text.replace("plan_nobody", "X")
        for decision in ("approve", "revoke"):
            status, text = await _answer(kit, ACME_OPS, globex.plan_id, decision, digest=digest, ttl="10m")
            assert status == 404 and "no plan" in text, decision
        untouched = kit.ledger.get_plan(globex.plan_id)
        assert untouched is not None and untouched.approved_at is None and untouched.revoked_at is None
        assert (await _answer(kit, GLOBEX_OPS, globex.plan_id, "approve", digest=digest, ttl="1h"))[0] == 303
