"""``skills/`` in a view of the tree: listed, read and imported like stubs, labelled with their
version, kept by ``restrict``, left out of exports, and an untrusted description cannot break out
of the index's docstring."""

from __future__ import annotations

import ast
from pathlib import Path

from codemode.stubs import SKILL_LABEL, SkillModule, render_tree

SOURCE = 'def hello(name: str) -> str:\n    """Greet."""\n    return name\n'
HOSTILE = 'ends the docstring """\nimport os  \\'


def test_a_view_with_skills_lists_reads_and_serves_them() -> None:
    plain = render_tree([])
    view = plain.with_skills(
        [SkillModule("greet", 3, SOURCE, "Greets people."), SkillModule("x", 1, SOURCE, HOSTILE)]
    )
    assert [e.path for e in view.list("")] == ["servers", "skills", "codemode_runtime.pyi"]
    assert [(e.path, e.module) for e in view.list("skills")] == [
        ("skills/__init__.py", "skills"),
        ("skills/greet.py", "skills.greet"),
        ("skills/x.py", "skills.x"),
    ]
    text = view.read("skills/greet.py")
    assert text.startswith(SOURCE) and text.endswith(f'{SKILL_LABEL} = "greet@3"  # set by codemode\n')
    module = view.module_source("skills.greet")
    assert module is not None and module.source == text and not module.is_package
    index = view.module_source("skills")
    assert index is not None and index.is_package
    parsed = ast.parse(index.source)
    assert len(parsed.body) == 2, "the hostile description stays inside the docstring"
    names = parsed.body[1]
    assert isinstance(names, ast.Assign) and ast.literal_eval(names.value) == ["greet", "x"]
    assert "skills.greet" not in {e.module for e in plain.list("")}
    assert plain.module_source("skills.greet") is None
    assert "skills/greet.py" in list(view.files())


def test_restrict_keeps_the_skills_and_export_leaves_them_out(tmp_path: Path) -> None:
    view = render_tree([]).with_skills([SkillModule("greet", 1, SOURCE, "Greets.")])
    assert view.restrict(lambda spec: False).read("skills/greet.py").startswith(SOURCE)
    view.export(tmp_path)
    assert not list(tmp_path.rglob("greet.py"))
    assert render_tree([]).with_skills([]).list("") == render_tree([]).list("")


RENEWALS = '''"""Renewal helpers."""


def at_risk(limit: int = 5) -> list[str]:
    """Accounts whose renewal is at risk of churning, worst first.

    Reads every open renewal.
    """
    return []


def _private(x: int) -> int:
    """Not importable: never searched."""
    return x
'''


def test_a_views_skills_are_searched_with_its_tools_and_other_views_rank_as_before() -> None:
    from tests.skills._deployment import crm_tree

    query = "renewal at risk of churning customer"
    alone = [(r.module, r.score) for r in crm_tree().search(query, 5)]
    tree = crm_tree()
    view = tree.with_skills([SkillModule("renewals", 2, RENEWALS, "Renewal helpers.")])
    [skill, *tools] = view.search(query, 5)
    assert (skill.kind, skill.module, skill.tool, skill.server) == ("skill", "skills.renewals", "at_risk", "")
    assert (skill.import_line, skill.path) == ("from skills.renewals import at_risk", "skills/renewals.py")
    assert (
        skill.text == "skills.renewals.at_risk: Accounts whose renewal is at risk of churning, worst first."
    )
    assert {t.kind for t in tools} == {"tool"}
    assert [r.text for r in view.search(query, 1, "name")] == ["skills.renewals.at_risk"]
    assert view.search(query, 1, "full")[0].text == (
        "from skills.renewals import at_risk\n"
        "def at_risk(limit: int=5) -> list[str]:\n"
        '    """Accounts whose renewal is at risk of churning, worst first.\n\n'
        "    Reads every open renewal.\n"
        '    """'
    )
    assert "_private" not in {r.tool for r in view.search("not importable never searched", 5)}
    # The tree and a restricted view without the skill rank exactly as a tree that never had it.
    assert [(r.module, r.score) for r in tree.search(query, 5)] == alone
    index, rows = view.search_snapshot()
    assert "skills.renewals.at_risk" in rows and len(index) == len(rows) == 3
    assert "skills.renewals.at_risk" not in tree.search_snapshot()[1]
