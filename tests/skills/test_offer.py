"""Which skills a run is offered: the tenant's current ones, narrowed by the principal's ``skills``
rule, none of another tenant's, none that import a tool the principal cannot see, and none that
import a skill not offered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode.config import PolicyConfig, PrincipalPolicy
from codemode.ledger import StoreLedger, open_ledger
from codemode.skills import TenantSkills, offered_skills
from codemode.stubs import VirtualTree, render_tree
from tests.skills._deployment import SKILL, crm_tree

PLAIN = 'def hello(name: str) -> str:\n    """Greet."""\n    return name\n'
USES_CUSTOMERS = (
    'from skills.customers import company\n\n\ndef shout(customer_id: str) -> str:\n    """Loud."""\n'
    "    return company(customer_id).upper()\n"
)
POLICY = PolicyConfig(
    principals={
        "alice": PrincipalPolicy(tenants=["acme"]),
        "greeter": PrincipalPolicy(tenants=["acme"], skills=["hel*", "greet_*"]),
        "docs_only": PrincipalPolicy(tenants=["acme"], tools=["docs/*"]),
        "eve": PrincipalPolicy(tenants=["globex"]),
    }
)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[StoreLedger]:
    with open_ledger(tmp_path / "codemode.db") as opened:
        skills = TenantSkills(opened.skills, "acme", crm_tree())
        for name, source in (("hello", PLAIN), ("customers", SKILL), ("shout", USES_CUSTOMERS)):
            skills.save(name, source, name, by="cli", approve=True)
        yield opened


def _offered(ledger: StoreLedger, principal: str, view: VirtualTree | None = None) -> list[str]:
    tree = crm_tree()
    modules = offered_skills(ledger.skills, tree, view or tree, POLICY, principal, "acme")
    return [m.name for m in modules]


def test_the_tenants_current_skills_narrowed_by_the_principals_rule(ledger: StoreLedger) -> None:
    assert _offered(ledger, "alice") == ["customers", "hello", "shout"]
    assert _offered(ledger, "greeter") == ["hello"]
    assert _offered(ledger, "eve") == [], "eve is not in acme"


def test_a_skill_that_needs_a_hidden_tool_is_not_offered_nor_are_its_importers(ledger: StoreLedger) -> None:
    no_crm = render_tree([])
    assert _offered(ledger, "docs_only", no_crm) == ["hello"]


def test_a_revoked_skill_takes_its_importers_with_it(ledger: StoreLedger) -> None:
    ledger.skills.revoke("acme", "customers", by="cli")
    assert _offered(ledger, "alice") == ["hello"]
