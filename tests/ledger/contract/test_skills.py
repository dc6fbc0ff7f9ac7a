"""Saved skills in the ledger, on every store: versions numbered per tenant and name, content fixed
once proposed, approval and revocation as events, self-approval of a run's proposal refused,
tenants apart, and every row re-derived exactly by ``verify``."""

from __future__ import annotations

from typing import Any

import pytest

from codemode.ledger import LedgerStateError, SkillVersion, StoreLedger
from tests.ledger.contract.conftest import MakeLedger, OpenClient

SOURCE = 'def hello(name: str) -> str:\n    """Greet."""\n    return name\n'


def _propose(ledger: StoreLedger, name: str = "greet", **options: Any) -> SkillVersion:
    values: dict[str, Any] = {
        "description": "Greets",
        "source": SOURCE,
        "digest": "sha256:src",
        "pin": "sha256:pin",
        "deps": {"servers.crm.get_customer": "sha256:tool"},
        "proposed_by": "alice",
    }
    values.update(options)
    return ledger.skills.propose("acme", name, **values)


def test_a_proposal_is_read_back_by_another_client(connect: OpenClient, make_ledger: MakeLedger) -> None:
    first, second = make_ledger(connect()), make_ledger(connect())
    proposed = _propose(first, proposed_in_run="run-1")
    assert (proposed.version, proposed.status, proposed.skill_id) == (1, "proposed", "acme::greet@1")
    assert proposed.deps == {"servers.crm.get_customer": "sha256:tool"}
    assert second.skills.versions("acme") == [proposed]
    assert second.skills.active("acme") == {}, "a proposal is not usable"


def test_versions_count_up_per_tenant_and_name(ledger: StoreLedger) -> None:
    assert [_propose(ledger).version for _ in range(3)] == [1, 2, 3]
    assert _propose(ledger, "other").version == 1
    assert (
        ledger.skills.propose(
            "globex", "greet", description="d", source=SOURCE, digest="d", pin="p", deps={}, proposed_by="bob"
        ).version
        == 1
    )
    assert [v.version for v in ledger.skills.versions("acme", "greet")] == [1, 2, 3]
    assert [v.tenant for v in ledger.skills.versions("globex")] == ["globex"]


def test_the_newest_approved_version_is_active_and_revoking_removes_the_skill(ledger: StoreLedger) -> None:
    first = _propose(ledger, approve=True)
    assert first.status == "approved" and first.approved_by == "alice"
    _propose(ledger)  # version 2, only proposed
    assert ledger.skills.active("acme")["greet"].version == 1
    ledger.skills.approve("acme", "greet", 2, by="carol")
    assert ledger.skills.active("acme")["greet"].version == 2
    assert ledger.skills.active("globex") == {}, "another tenant sees nothing"
    revoked = ledger.skills.revoke("acme", "greet", by="carol", note="retired")
    assert [(v.version, v.status, v.revoked_by) for v in revoked] == [
        (1, "revoked", "carol"),
        (2, "revoked", "carol"),
    ]
    assert ledger.skills.active("acme") == {}
    with pytest.raises(LedgerStateError, match="nothing to revoke"):
        ledger.skills.revoke("acme", "greet", by="carol")
    assert ledger.verify().ok


def test_a_runs_proposal_is_not_approved_by_its_proposer_unless_allowed(ledger: StoreLedger) -> None:
    _propose(ledger, proposed_in_run="run-1", proposed_by="bot")
    with pytest.raises(LedgerStateError, match="may not approve it"):
        ledger.skills.approve("acme", "greet", 1, by="bot")
    assert ledger.skills.active("acme") == {}
    approved = ledger.skills.approve("acme", "greet", 1, by="bot", allow_self=True)
    assert approved.status == "approved"
    with pytest.raises(LedgerStateError, match="approved, not proposed"):
        ledger.skills.approve("acme", "greet", 1, by="carol")
    with pytest.raises(LedgerStateError, match="approved by a person"):
        _propose(ledger, proposed_in_run="run-2", approve=True)


def test_approving_a_version_that_does_not_exist_is_refused(ledger: StoreLedger) -> None:
    with pytest.raises(LedgerStateError, match="no skill 'greet' version 4"):
        ledger.skills.approve("acme", "greet", 4, by="carol")
    assert ledger.events() == []


def test_skill_rows_are_derived_from_events_and_an_edit_is_found(ledger: StoreLedger) -> None:
    version = _propose(ledger, approve=True)
    assert [e.kind for e in ledger.events()] == ["skill_proposed", "skill_approved"]
    assert ledger.verify().ok
    with ledger.store.transaction(write=True) as tx:  # what someone with write access could do
        tx.update("skills", version.skill_id, {"source": "import os\n"})
    where = [(p.kind, p.where) for p in ledger.verify().problems]
    assert where == [("row_edited", f"skills/{version.skill_id} column source")]


def test_a_version_content_never_changes_through_an_event(ledger: StoreLedger) -> None:
    from codemode.ledger._reduce import ReduceError, reduce

    version = _propose(ledger)
    with ledger.store.transaction(write=False) as tx:
        row = tx.row("skills", version.skill_id)
    fields = {"status": "approved", "approved_by": "c", "approved_at": "t", "source": "x"}
    with pytest.raises(ReduceError, match="must not change"):
        reduce("skill_approved", version.skill_id, fields, row)


def test_the_tenants_with_skills_are_listed(ledger: StoreLedger) -> None:
    assert ledger.skills.tenants() == []
    _propose(ledger)
    _propose(ledger, "other")
    ledger.skills.propose(
        "globex", "greet", description="d", source=SOURCE, digest="d", pin="p", deps={}, proposed_by="carol"
    )
    assert ledger.skills.tenants() == ["acme", "globex"]
