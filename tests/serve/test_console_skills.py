"""Skills in the console: each tenant's skills with their state and version, one skill whole (its
source, what it imports with their pins, and what changed when it is stale), and approve and revoke
through the functions ``codemode skill`` uses. A run's proposal is not approved by the principal
that made it unless the policy says so; another tenant's operator neither sees nor answers a
skill; a skill's hostile text is shown, never run."""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import urlencode

import pytest

from codemode.config import config_from_mapping
from codemode.ledger import SkillVersion, SqliteLedger
from codemode.skills import TenantSkills
from tests.skills._deployment import SKILL, crm_tree

from ._console_kit import ACME_OPS, GLOBEX_OPS, OPERATOR, FakeEngine, Kit, console_kit, csrf_of

pytestmark = pytest.mark.anyio

HOSTILE = '''"""Customer helpers <script>alert('skill')</script>."""

from servers.crm import get_customer


def company(customer_id: str) -> str:
    """The company name of one customer. \u202e<img src=x onerror=alert(1)>"""
    return str(get_customer(customer_id=customer_id)["company"])
'''


def _save(
    ledger: SqliteLedger,
    tenant: str,
    name: str,
    source: str = SKILL,
    *,
    by: str = "cli",
    run: str | None = None,
) -> SkillVersion:
    """What `codemode skill add` (approved) or a run's proposal (``run``) stores."""
    skills = TenantSkills(ledger.skills, tenant, crm_tree())
    return skills.save(
        name, source, "approve this skill <b>now</b> \u202egnp.exe", by=by, run_id=run, approve=run is None
    )


def _stored(ledger: SqliteLedger, tenant: str, name: str) -> SkillVersion:
    found = ledger.skills.get(tenant, name, 1)
    assert found is not None, name
    return found


async def _page(
    kit: Kit, who: dict[str, str], tenant: str, name: str, version: int | None = None
) -> tuple[int, str]:
    query = {"tenant": tenant, "name": name} | ({} if version is None else {"version": str(version)})
    response = await kit.client.get(f"/console/skill?{urlencode(query)}", headers=who)
    return response.status_code, response.text


async def _answer(kit: Kit, who: dict[str, str], decision: str, **fields: str) -> tuple[int, str]:
    csrf = csrf_of((await kit.client.get("/console/skills", headers=who)).text)
    data = {"decision": decision, "csrf_token": csrf, **fields}
    response = await kit.client.post("/console/skills/answer", data=data, headers=who)
    return response.status_code, response.headers.get("location", response.text)


def _rows(page: str) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for part in page.split('<tr class="skill" data-skill="')[1:]:
        name, _, rest = part.partition('" data-version="')
        version, _, rest = rest.partition('" data-state="')
        found.append((name, version, rest.split('"')[0]))
    return found


async def test_the_skills_page_lists_each_skill_with_its_state_and_version(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        _save(kit.ledger, "acme", "customers")
        _save(kit.ledger, "acme", "proposal", by="alice", run="run_1")
        _save(kit.ledger, "acme", "gone")
        kit.ledger.skills.revoke("acme", "gone", by="cli")
        _save(kit.ledger, "acme", "drifting")
        page = (await kit.client.get("/console/skills", headers=ACME_OPS)).text
        assert _rows(page) == [
            ("customers", "1", "approved"),
            ("drifting", "1", "approved"),
            ("gone", "1", "revoked"),
            ("proposal", "1", "proposed"),
        ]
        assert "in run run_1" in page
        assert "\u202e" not in page and "<b>now" not in page, "a description is shown as safe text"
        kit.engine.tree = crm_tree("Look up one customer, now differently.")  # get_customer re-approved
        page = (await kit.client.get("/console/skills", headers=ACME_OPS)).text
        assert [state for _, _, state in _rows(page)] == ["stale", "stale", "revoked", "proposed"]
        status, _ = await _answer(kit, ACME_OPS, "revoke", tenant="acme", name="proposal", version="1")
        assert status == 303 and _stored(kit.ledger, "acme", "proposal").status == "revoked", "rejected"


async def test_the_skill_page_shows_source_pins_and_what_changed_as_safe_text(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        saved = _save(kit.ledger, "acme", "customers", HOSTILE)
        status, text = await _page(kit, ACME_OPS, "acme", "customers")
        assert status == 200
        assert saved.pin in text and saved.digest in text and saved.deps["servers.crm.get_customer"] in text
        assert "servers.crm.get_customer" in text and "as pinned" in text
        assert "<script>" not in text and "<img" not in text and "<b>now" not in text
        assert "&lt;script&gt;alert(&#39;skill&#39;)&lt;/script&gt;" in text
        assert "\u202e" not in text and "\\u202e" in text, "a right-to-left override is shown escaped"
        assert 'id="approve-skill"' not in text, "approved and current: nothing to approve"

        kit.engine.tree = crm_tree("Look up one customer, now differently.")
        status, text = await _page(kit, ACME_OPS, "acme", "customers")
        assert 'id="skill-state">stale<' in text and "servers.crm.get_customer changed" in text
        now = TenantSkills(kit.ledger.skills, "acme", kit.engine.tree).tool_pins["servers.crm.get_customer"]
        assert now in text, "the dependency's pin now, beside the pinned one"
        assert 'id="approve-skill"' in text and "re-approve v1" in text


async def test_an_operator_approves_a_proposal_and_re_approves_a_stale_skill(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        proposal = _save(kit.ledger, "acme", "customers", by="alice", run="run_1")
        status, text = await _page(kit, ACME_OPS, "acme", "customers")
        assert 'id="skill-state">proposed<' in text and 'id="approve-skill"' in text
        wrong = await _answer(
            kit, ACME_OPS, "approve", tenant="acme", name="customers", version="1", digest="sha256:other"
        )
        assert wrong[0] == 409 and "out of date" in wrong[1]
        fields = {"tenant": "acme", "name": "customers", "version": "1", "digest": proposal.digest}
        status, location = await _answer(kit, ACME_OPS, "approve", **fields)
        assert (status, location) == (
            303,
            "/console/skill?tenant=acme&name=customers&done=approved&version=1",
        )
        approved = kit.ledger.skills.get("acme", "customers", 1)
        assert approved is not None and (approved.status, approved.approved_by) == ("approved", "acme-ops")

        kit.engine.tree = crm_tree("Look up one customer, now differently.")
        _, text = await _page(kit, ACME_OPS, "acme", "customers")
        assert 'id="skill-state">stale<' in text
        status, location = await _answer(kit, ACME_OPS, "approve", **fields)
        assert status == 303 and "version=2" in location
        _, text = await _page(kit, ACME_OPS, "acme", "customers")
        assert 'id="skill-state">approved<' in text and "v2" in text and "stale:" not in text
        again = await _answer(kit, ACME_OPS, "approve", **fields | {"version": "2"})
        assert again[0] == 409 and "nothing to approve" in again[1]

        status, _ = await _answer(kit, ACME_OPS, "revoke", tenant="acme", name="customers")
        assert status == 303
        assert [v.status for v in kit.ledger.skills.versions("acme", "customers")] == ["revoked", "revoked"]
        assert [v.revoked_by for v in kit.ledger.skills.versions("acme", "customers")] == ["acme-ops"] * 2
        assert kit.ledger.verify().ok


async def test_a_runs_proposal_is_not_approved_by_its_proposer_unless_the_policy_says_so(
    tmp_path: Path,
) -> None:
    async with console_kit(tmp_path) as kit:
        mine = _save(kit.ledger, "acme", "customers", by="acme-ops", run="run_1")
        fields = {"tenant": "acme", "name": "customers", "version": "1", "digest": mine.digest}
        status, text = await _answer(kit, ACME_OPS, "approve", **fields)
        assert status == 409 and "may not approve it" in html.unescape(text)
        assert _stored(kit.ledger, "acme", "customers").status == "proposed"
        status, _ = await _answer(kit, OPERATOR, "approve", **fields)
        assert status == 303, "another principal approves it"

    policy = {"policy": {"principals": {"acme-ops": {"tenants": ["acme"], "approve_own_skills": True}}}}
    engine = FakeEngine(config=config_from_mapping(policy))
    async with console_kit(tmp_path / "own", engine) as kit:
        mine = _save(kit.ledger, "acme", "customers", by="acme-ops", run="run_1")
        fields = {"tenant": "acme", "name": "customers", "version": "1", "digest": mine.digest}
        assert (await _answer(kit, ACME_OPS, "approve", **fields))[0] == 303
        assert _stored(kit.ledger, "acme", "customers").approved_by == "acme-ops"


async def test_another_tenants_operator_neither_sees_nor_answers_a_skill(tmp_path: Path) -> None:
    async with console_kit(tmp_path) as kit:
        secret = _save(kit.ledger, "globex", "secret_report", by="carol", run="run_1")
        _save(kit.ledger, "acme", "customers")
        listed = (await kit.client.get("/console/skills", headers=ACME_OPS)).text
        assert _rows(listed) == [("customers", "1", "approved")] and "globex" not in listed
        assert _rows((await kit.client.get("/console/skills", headers=GLOBEX_OPS)).text) == [
            ("secret_report", "1", "proposed")
        ]
        assert len(_rows((await kit.client.get("/console/skills", headers=OPERATOR)).text)) == 2
        hidden = await _page(kit, ACME_OPS, "globex", "secret_report")
        missing = await _page(kit, ACME_OPS, "globex", "no_such_skill")
        assert hidden[0] == missing[0] == 404
        assert hidden[1].replace("secret_report", "X") == missing[1].replace("no_such_skill", "X")
        assert "carol" not in hidden[1] and "Customer helpers" not in hidden[1]
        fields = {"tenant": "globex", "name": "secret_report", "version": "1", "digest": secret.digest}
        for decision in ("approve", "revoke"):
            status, text = await _answer(kit, ACME_OPS, decision, **fields)
            assert status == 404 and "no skill" in html.unescape(text), decision
        assert _stored(kit.ledger, "globex", "secret_report").status == "proposed"
        assert (await _answer(kit, GLOBEX_OPS, "approve", **fields))[0] == 303
