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
