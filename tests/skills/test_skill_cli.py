"""``codemode skill`` against a deployment's approved tools and its ledger: add, list, show, a tool
change making a skill stale until re-approved, review, diff, revoke, rollback, export and import
(a tampered file refused), tenants apart, and ``ledger verify`` passing after all of it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from codemode.cli._main import cli
from tests.skills._deployment import (
    SKILL,
    MakeDeployment,
    approve_tools,
    deployment_ledger,
    skill_cli,
    skill_json,
)


def _file(root: Path, text: str, name: str = "company.py") -> Path:
    path = root / name
    path.write_text(text, encoding="utf-8")
    return path


def test_add_list_show_and_tenants_apart(tmp_path: Path, make_deployment: MakeDeployment) -> None:
    config = make_deployment(tmp_path)
    added = skill_json(config, "add", "customers", str(_file(tmp_path, SKILL)), "--tenant", "acme")
    assert (added["version"], added["status"], added["approved_by"]) == (1, "approved", "cli")
    assert added["description"] == "Customer helpers."
    assert list(added["deps"]) == ["servers.crm.get_customer"]
    listed = skill_json(config, "list", "--tenant", "acme")
    assert [(r["name"], r["version"], r["active"], r["stale"]) for r in listed] == [
        ("customers", 1, True, [])
    ]
    assert skill_json(config, "list", "--tenant", "globex") == [], "another tenant sees nothing"
    shown = skill_json(config, "show", "customers", "--tenant", "acme")
    assert shown["functions"] == [
        {"signature": "def company(customer_id: str) -> str", "doc": "The company name of one customer."}
    ]
    assert shown["source"] == SKILL
    text = skill_cli(config, "show", "customers", "--tenant", "acme").output
    assert "imports servers.crm.get_customer" in text and "def company(customer_id: str) -> str" in text
    missing = skill_cli(config, "show", "customers", "--tenant", "globex")
    assert missing.exit_code == 1 and "no skill 'customers' in tenant 'globex'" in missing.output


def test_codemode_tree_lists_and_prints_the_tenants_skills(
    tmp_path: Path, make_deployment: MakeDeployment
) -> None:
    config = make_deployment(tmp_path, '[policy.principals.local]\ntenants = ["default", "acme"]\n')
    tree = ["tree", "--config", str(config)]
    before = CliRunner().invoke(cli, tree)
    assert before.exit_code == 0 and "servers/" in before.output, before.output
    assert "skills/" not in before.output, "no ledger yet: no skills"
    skill_json(config, "add", "customers", str(_file(tmp_path, SKILL)), "--tenant", "acme")
    root = CliRunner().invoke(cli, [*tree, "--json", "--tenant", "acme"])
    assert {
        "path": "skills",
        "kind": "directory",
        "name": "skills",
        "summary": "1 saved skill",
    } in json.loads(root.stdout)
    printed = CliRunner().invoke(cli, [*tree, "skills/customers.py", "--tenant", "acme"])
    assert printed.exit_code == 0 and printed.output.startswith(SKILL.rstrip())
    assert "skills/" not in CliRunner().invoke(cli, tree).output, "the default tenant has none"
    other = CliRunner().invoke(cli, [*tree, "skills/customers.py", "--tenant", "globex"])
    assert other.exit_code == 1 and "no such file" in other.output


def test_a_bad_skill_is_refused_with_the_line_and_nothing_is_saved(
    tmp_path: Path, make_deployment: MakeDeployment
) -> None:
    config = make_deployment(tmp_path)
    bad = _file(tmp_path, SKILL.replace("from servers.crm import get_customer", "import requests"))
    refused = skill_cli(config, "add", "customers", str(bad))
    assert refused.exit_code == 2
    assert "skill 'customers', line 3: imports 'requests'" in refused.output
    shadow = skill_cli(config, "add", "crm", str(_file(tmp_path, SKILL)))
    assert shadow.exit_code == 2 and "shadows a server or a tool" in shadow.output
    skill_json(config, "add", "customers", str(_file(tmp_path, SKILL)))
    again = skill_cli(config, "add", "customers", str(_file(tmp_path, SKILL)))
    assert again.exit_code == 2 and "exists in tenant 'default' already: pass --update" in again.output
    assert [r["version"] for r in skill_json(config, "list")] == [1]


def test_a_changed_tool_makes_the_skill_stale_until_reapproved(
    tmp_path: Path, make_deployment: MakeDeployment
) -> None:
    config = make_deployment(tmp_path)
    skill_json(config, "add", "customers", str(_file(tmp_path, SKILL)))
    approve_tools(tmp_path, description="Look up one customer, now with their plan.")
    [row] = skill_json(config, "list")
    assert row["active"] and row["stale"] and "servers.crm.get_customer changed" in row["stale"][0]
    reviewed = skill_json(config, "review")
    assert [r["name"] for r in reviewed] == ["customers"]
    diff = skill_json(config, "diff", "customers")
    assert [d["module"] for d in diff["changed_dependencies"]] == ["servers.crm.get_customer"]
    reapproved = skill_json(config, "approve", "customers")
    assert reapproved["version"] == 2 and reapproved["note"].startswith("re-approved v1")
    [row] = skill_json(config, "list")
    assert (row["version"], row["stale"]) == (2, [])
    assert skill_json(config, "review") == []
    nothing = skill_cli(config, "approve", "customers")
    assert nothing.exit_code == 1 and "nothing to approve" in nothing.output


def test_revoke_and_rollback(tmp_path: Path, make_deployment: MakeDeployment) -> None:
    config = make_deployment(tmp_path)
    skill_json(config, "add", "customers", str(_file(tmp_path, SKILL)))
    second = SKILL.replace('"company"', '"name"')
    skill_json(config, "add", "customers", str(_file(tmp_path, second, "v2.py")), "--update")
    rolled = skill_json(config, "rollback", "customers")
    assert (rolled["version"], rolled["source"], rolled["note"]) == (3, SKILL, "rollback to v1")
    diff = skill_json(config, "diff", "customers", "--against", "2")
    assert '-    return str(get_customer(customer_id=customer_id)["name"])' in diff["source_diff"]
    to_two = skill_json(config, "rollback", "customers", "--to", "2")
    assert (to_two["version"], to_two["source"]) == (4, second)
    revoked = skill_json(config, "revoke", "customers")
    assert [v["version"] for v in revoked] == [1, 2, 3, 4]
    assert skill_json(config, "list") == []
    assert len(skill_json(config, "list", "--all")) == 4
    nothing = skill_cli(config, "rollback", "customers", "--to", "9")
    assert nothing.exit_code == 1 and "no version 9 to roll back to" in nothing.output


def test_export_then_import_elsewhere_and_a_tampered_export_is_refused(
    tmp_path: Path, make_deployment: MakeDeployment
) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    source_config, target_config = make_deployment(here), make_deployment(there)
    skill_json(source_config, "add", "customers", str(_file(here, SKILL)))
    exported = here / "customers.json"
    assert skill_cli(source_config, "export", "customers", "-o", str(exported)).exit_code == 0
    body = json.loads(exported.read_text(encoding="utf-8"))
    tampered = there / "tampered.json"
    body["source"] = body["source"].replace("get_customer(", "get_customer(  ")
    tampered.write_text(json.dumps(body), encoding="utf-8")
    refused = skill_cli(target_config, "import", str(tampered))
    assert refused.exit_code == 2 and "was changed after it was exported" in refused.output
    imported = skill_json(target_config, "import", str(exported))
    assert (imported["status"], imported["source"]) == ("proposed", SKILL)
    assert skill_json(target_config, "list")[0]["active"] is False, "imported: only proposed"
    approved = skill_json(target_config, "approve", "customers")
    assert approved["status"] == "approved"
    assert skill_json(target_config, "list")[0]["active"] is True


def test_a_runs_proposal_is_not_approved_by_its_proposer_unless_the_policy_says_so(
    tmp_path: Path, make_deployment: MakeDeployment
) -> None:
    config = make_deployment(tmp_path, "[policy.principals.trusted]\napprove_own_skills = true\n")
    # What a run's proposal stores, as `skill add` computes it for this deployment.
    pinned = skill_json(config, "add", "customers", str(_file(tmp_path, SKILL)), "--tenant", "elsewhere")
    with deployment_ledger(config) as ledger:
        for by in ("bot", "trusted"):
            ledger.skills.propose(
                "default",
                f"from_{by}",
                description="d",
                source=SKILL,
                digest=pinned["digest"],
                pin=pinned["pin"],
                deps=pinned["deps"],
                proposed_by=by,
                proposed_in_run="run-1",
            )
    refused = skill_cli(config, "approve", "from_bot", "--by", "bot")
    assert refused.exit_code == 2 and "may not approve it" in refused.output
    assert skill_json(config, "approve", "from_trusted", "--by", "trusted")["status"] == "approved"
    assert skill_json(config, "approve", "from_bot", "--by", "carol")["approved_by"] == "carol"
    with deployment_ledger(config) as ledger:
        ledger.skills.propose(
            "default",
            "stale_one",
            description="d",
            source=SKILL,
            digest="d",
            pin="p",
            deps={},
            proposed_by="bot",
            proposed_in_run="run-2",
        )
    changed = skill_cli(config, "approve", "stale_one", "--by", "carol")
    assert changed.exit_code == 1 and "changed since it was proposed" in changed.output


def test_the_ledger_verifies_after_skill_commands(tmp_path: Path, make_deployment: MakeDeployment) -> None:
    config = make_deployment(tmp_path)
    skill_json(config, "add", "customers", str(_file(tmp_path, SKILL)))
    skill_json(config, "revoke", "customers")
    verified = CliRunner().invoke(cli, ["ledger", "verify", "--config", str(config)])
    assert verified.exit_code == 0, verified.output
