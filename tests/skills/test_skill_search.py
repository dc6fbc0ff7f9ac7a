"""``codemode search`` finds the saved skills a principal is offered, by their docstrings, beside
the tools: tenant acme's approved skill is found for acme's principal and for no one else (nor
in the tree), another principal's results and scores are exactly those without it, a proposed
skill is never found, a revoked one is gone on the next search, and the cached index of tools
never carries a skill to another tenant's search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from codemode.cli._main import cli
from tests.skills._deployment import SKILL, MakeDeployment, approve_tools, skill_cli, skill_json

POLICY = """
[policy.principals.local]
tenants = ["default", "acme"]
[policy.principals.eve]
tenants = ["globex"]
"""
QUERY = "the company name of one customer"
INVOICES = '''"""Invoice helpers."""

from servers.crm import get_customer


def overdue_invoices(customer_id: str) -> list[str]:
    """The overdue invoices of one customer, oldest first."""
    return [str(get_customer(customer_id=customer_id)["company"])]
'''


@pytest.fixture(autouse=True)
def private_search_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CODEMODE_CACHE_DIR", raising=False)
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)


def search(config: Path, query: str, *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["search", query, "--json", "--config", str(config), *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def ranked(hits: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    return [(hit["kind"], hit["module"], hit["score"]) for hit in hits]


def _file(root: Path, name: str, text: str) -> str:
    path = root / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_an_approved_skill_is_found_for_its_tenant_only_and_changes_no_one_elses_scores(
    tmp_path: Path, make_deployment: MakeDeployment
) -> None:
    config = make_deployment(tmp_path, POLICY)
    eve_before = search(config, QUERY, "--principal", "eve")
    local_before = search(config, QUERY)
    skill_json(config, "add", "customers", _file(tmp_path, "customers", SKILL), "--tenant", "acme")

    [first, *rest] = search(config, QUERY, "--tenant", "acme")
    assert (first["kind"], first["module"], first["tool"]) == ("skill", "skills.customers", "company")
    assert first["import_line"] == "from skills.customers import company"
    assert first["text"] == "skills.customers.company: The company name of one customer."
    assert {hit["kind"] for hit in rest} == {"tool"}
    [full] = search(config, QUERY, "--tenant", "acme", "--detail", "full", "--k", "1")
    assert full["text"] == (
        "from skills.customers import company\n"
        "def company(customer_id: str) -> str:\n"
        '    """The company name of one customer."""'
    )

    # The cached index of tools was not changed for anyone: same hits, same scores, no skill.
    assert search(config, QUERY) == local_before, "the default tenant has no skill"
    assert search(config, QUERY, "--principal", "eve") == eve_before
    assert search(config, QUERY, "--principal", "eve", "--tenant", "acme") == eve_before, "eve is not in acme"
    assert ranked(search(config, QUERY, "--principal", "eve", "--detail", "full")) == ranked(eve_before)
    # Nor the tree: eve lists no skills/ and cannot read acme's skill.
    tree = ["tree", "--config", str(config), "--principal", "eve"]
    assert "skills" not in CliRunner().invoke(cli, tree).output
    read = CliRunner().invoke(cli, [*tree, "skills/customers.py", "--tenant", "acme"])
    assert read.exit_code == 1 and "no such file" in read.output


def test_a_proposed_skill_is_not_found_and_a_revoked_one_is_gone_at_once(
    tmp_path: Path, make_deployment: MakeDeployment
) -> None:
    config = make_deployment(tmp_path, POLICY)
    # Proposed in acme (imported from an export, as a run's proposal would be): not approved.
    skill_json(config, "add", "billing", _file(tmp_path, "billing", INVOICES), "--tenant", "default")
    exported = tmp_path / "billing.json"
    assert skill_cli(config, "export", "billing", "-o", str(exported)).exit_code == 0
    assert skill_json(config, "import", str(exported), "--tenant", "acme")["status"] == "proposed"
    skill_json(config, "add", "customers", _file(tmp_path, "customers", SKILL), "--tenant", "acme")

    acme = search(config, "overdue invoices of a customer", "--tenant", "acme")
    assert "skill" in {hit["kind"] for hit in acme}, "customers is offered"
    assert "skills.billing" not in {hit["module"] for hit in acme}, "billing is only proposed"
    assert search(config, "overdue invoices of a customer")[0]["module"] == "skills.billing"

    assert search(config, QUERY, "--tenant", "acme")[0]["module"] == "skills.customers"
    skill_json(config, "revoke", "customers", "--tenant", "acme")
    after = search(config, QUERY, "--tenant", "acme")
    assert after and {hit["kind"] for hit in after} == {"tool"}
    assert after == search(config, QUERY, "--principal", "eve"), "again the search of tools alone"


def test_a_stale_skill_is_not_found_until_reapproved(tmp_path: Path, make_deployment: MakeDeployment) -> None:
    config = make_deployment(tmp_path, POLICY)
    skill_json(config, "add", "customers", _file(tmp_path, "customers", SKILL))
    assert search(config, QUERY)[0]["module"] == "skills.customers"
    approve_tools(tmp_path, description="Look up one customer, now with their plan.")
    assert {hit["kind"] for hit in search(config, QUERY)} == {"tool"}, "its tool changed: stale"
    skill_json(config, "approve", "customers")
    assert search(config, QUERY)[0]["module"] == "skills.customers"
