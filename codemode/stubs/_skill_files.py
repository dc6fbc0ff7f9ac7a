"""Saved skills as files of the tree: ``skills/__init__.py`` (the index) and ``skills/<name>.py``.

The tree holds them as given: which skills a view shows (the run's tenant, the principal's
``skills`` rule, approved and current only) is decided above, where skills are known. A skill's
file is its source as approved, plus one last line naming its version, which the in-sandbox
runtime reads to tell the ledger which skill made a call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from codemode.stubs._sanitize import comment, docline

SKILL_LABEL: Final = "__codemode_skill__"
"""The module variable that names a skill's version (``name@version``); no skill may set it."""


@dataclass(frozen=True, slots=True)
class SkillModule:
    """One skill as a view of the tree shows it."""

    name: str
    version: int
    source: str
    summary: str
    """One line: the skill's description."""

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def line(self) -> str:
        """The summary as one clean line, for listings."""
        return comment(self.summary)


def render_skill(skill: SkillModule) -> str:
    # After the source, so a skill cannot set it to anything else at import.
    return f"{skill.source.rstrip()}\n\n{SKILL_LABEL} = {json.dumps(skill.label)}  # set by codemode\n"


def render_skills_index(skills: tuple[SkillModule, ...]) -> str:
    lines = [
        '"""Saved skills: reviewed programs kept as modules. Import one like a tool:',
        "",
        "    from skills.<name> import <function>",
        "",
        "Each calls tools under your own permissions. Read skills/<name>.py for its functions.",
        "",
    ]
    lines += [f"{s.name} (v{s.version}): {docline(s.summary)}" for s in skills]
    lines += ['"""', "", f"__all__ = {json.dumps([s.name for s in skills])}", ""]
    return "\n".join(lines)
