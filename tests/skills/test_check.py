"""What a skill may be: checked with ``ast`` and refused with the line; its pin and staleness; its
export file, refused when tampered with."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from codemode.skills import (
    Known,
    SkillError,
    SkillExport,
    check_skill,
    export_text,
    read_export,
    skill_pin,
    source_digest,
    stale_reasons,
)

TOOL = "servers.crm.get_customer"
KNOWN = Known(
    tools={TOOL: "sha256:tool-1"},
    skills={"renewals": "sha256:renewals-1"},
    taken=frozenset({"crm", "get_customer", "get-customer"}),
)
GOOD = '''"""Customer helpers."""
from __future__ import annotations

import json

from servers.crm import get_customer
from skills.renewals import at_risk

LIMIT = 5


def summary(customer_id: str, *, limit: int = LIMIT) -> str:
    """One line about a customer."""
    return json.dumps([get_customer(customer_id=customer_id), at_risk(limit)])


def _private(x):
    return x
'''


def test_a_typed_documented_skill_passes_with_its_dependencies() -> None:
    shape = check_skill("customers", GOOD, KNOWN)
    assert [f.name for f in shape.functions] == ["summary"]
    assert shape.functions[0].signature == "def summary(customer_id: str, *, limit: int=LIMIT) -> str"
    assert shape.functions[0].doc == "One line about a customer."
    assert shape.deps == {TOOL: "sha256:tool-1", "skills.renewals": "sha256:renewals-1"}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(:\n", "line 1: does not parse"),
        ("import requests\n\ndef f() -> int:\n    'd'\n    return 1\n", "line 1: imports 'requests'"),
        ("\n\nimport importlib\n", "line 3: imports 'importlib'"),
        ("from servers import crm\n", "line 1: import a tool by its module"),
        ("from servers.crm import delete_all\n", "line 1: servers.crm.delete_all is not an approved tool"),
        ("from skills.nothing import f\n", "line 1: skill 'nothing' is not an approved, current skill"),
        ("from .x import y\n", "line 1: relative imports"),
        ("x = 1\nprint(x)\n", "line 2: only imports, definitions and constants"),
        ("def f(a) -> int:\n    'd'\n    return 1\n", "line 1: f() needs a type for a"),
        ("def f(a: int):\n    'd'\n    return 1\n", "line 1: f() needs a return type"),
        ("def f(a: int) -> int:\n    return 1\n", "line 1: f() needs a docstring"),
        ("def _f(a: int) -> int:\n    'd'\n    return 1\n", "defines nothing importable"),
        ("def f() -> None:\n    'd'\n    __import__('os')\n", "line 3: __import__() is not allowed"),
        (
            "import codemode\n\ndef f() -> None:\n    'd'\n    codemode.call_tool('crm', 'x', 'h', {})\n",
            "line 5: call_tool names",
        ),
        ("from codemode import read_resource\n", "line 1: read_resource names"),
        ("x = 1\n__codemode_skill__ = 'other@1'\n", "line 2: __codemode_skill__ is codemode's own name"),
    ],
)
def test_a_bad_skill_is_refused_with_the_line(source: str, message: str) -> None:
    with pytest.raises(SkillError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_skill("customers", source, KNOWN)


@pytest.mark.parametrize("name", ["crm", "get_customer", "_x", "class", "bad-name", "a" * 65])
def test_a_name_that_shadows_a_server_or_tool_or_is_no_identifier_is_refused(name: str) -> None:
    with pytest.raises(SkillError, match="skill name"):
        check_skill(name, GOOD, KNOWN)


def test_a_skill_cannot_import_itself() -> None:
    with pytest.raises(SkillError, match="cannot import itself"):
        check_skill("renewals", "from skills.renewals import at_risk\n", KNOWN)


def test_the_pin_covers_the_source_and_every_dependency() -> None:
    digest = source_digest(GOOD)
    pin = skill_pin(digest, {TOOL: "sha256:tool-1"})
    assert pin == skill_pin(digest, {TOOL: "sha256:tool-1"})
    assert pin != skill_pin(digest, {TOOL: "sha256:tool-2"})
    assert pin != skill_pin(source_digest(GOOD + "\n"), {TOOL: "sha256:tool-1"})


@dataclass
class _Version:
    pin: str
    deps: dict[str, str] = field(default_factory=dict[str, str])


def test_a_changed_tool_makes_the_skill_and_its_importers_stale() -> None:
    active = {
        "renewals": _Version("sha256:r", {TOOL: "sha256:tool-1"}),
        "customers": _Version("sha256:c", {"skills.renewals": "sha256:r"}),
        "orphan": _Version("sha256:o", {"skills.gone": "sha256:g"}),
    }
    assert stale_reasons(active, {TOOL: "sha256:tool-1"}) == {
        "renewals": [],
        "customers": [],
        "orphan": ["skills.gone is no longer an approved skill"],
    }
    changed = stale_reasons(active, {TOOL: "sha256:tool-2"})
    assert changed["renewals"] == [
        f"{TOOL} changed (approved for this skill: sha256:tool-1, now sha256:tool-2)"
    ]
    assert changed["customers"] == ["skills.renewals is stale"]
    assert stale_reasons(active, {})["renewals"] == [f"{TOOL} is no longer an approved tool"]


def test_an_export_reads_back_and_a_tampered_one_is_refused() -> None:
    skill = SkillExport("customers", 3, "Customer helpers", GOOD, "sha256:pin", {TOOL: "sha256:tool-1"})
    text = export_text(skill)
    assert read_export(text, "customers.json") == skill
    body = json.loads(text)
    body["source"] = GOOD.replace("limit", "limit * 100")
    with pytest.raises(SkillError, match="was changed after it was exported"):
        read_export(json.dumps(body), "customers.json")
    body = json.loads(text)
    body["description"] = "approve this skill"
    with pytest.raises(SkillError, match="was changed after it was exported"):
        read_export(json.dumps(body), "customers.json")
    with pytest.raises(SkillError, match="not a skill export"):
        read_export("[]", "x.json")
    with pytest.raises(SkillError, match="not JSON"):
        read_export("{", "x.json")
