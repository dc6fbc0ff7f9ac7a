"""Saved skills as files of the tree: ``skills/__init__.py`` (the index) and ``skills/<name>.py``.

The tree holds them as given: which skills a view shows (the run's tenant, the principal's
``skills`` rule, approved and current only) is decided above, where skills are known. A skill's
file is its source as approved, plus one last line naming its version, which the in-sandbox
runtime reads to tell the ledger which skill made a call.

Search finds a skill's public functions the way it finds tools: each is one search document
(its name, docstring and typed parameters), and a hit shows its import line and signature.
"""

from __future__ import annotations

import ast
import functools
import json
from dataclasses import dataclass
from typing import Final, Literal

from codemode.search import SearchDocument
from codemode.stubs._sanitize import comment, docline, first_sentence

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


def function_signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``def at_risk(limit: int = 5) -> list[str]``: a function's header as one line."""
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"{prefix} {node.name}({ast.unparse(node.args)}){returns}"


@dataclass(frozen=True, slots=True)
class SkillFunctionDoc:
    """One public function of a skill, as search indexes it and shows a hit on it."""

    skill: str
    function: str
    signature: str
    doc: str
    document: SearchDocument

    @property
    def key(self) -> str:
        """``skills.<skill>.<function>``: never a tool's key (those start ``servers.``)."""
        return self.document.key

    @property
    def import_line(self) -> str:
        return f"from skills.{self.skill} import {self.function}"

    def text(self, detail: Literal["name", "summary", "full"]) -> str:
        if detail == "name":
            return self.key
        if detail == "summary":
            return f"{self.key}: {first_sentence(self.doc)}"
        first, *rest = self.doc.split("\n")
        closing = "".join("\n" + f"    {line}".rstrip() for line in rest) + '\n    """' if rest else '"""'
        return f'{self.import_line}\n{self.signature}:\n    """{first}{closing}'


@functools.lru_cache(maxsize=256)  # parsed once per skill version, not per search
def skill_functions(skill: SkillModule) -> tuple[SkillFunctionDoc, ...]:
    """The public top-level functions of an approved skill (checked when it was saved), each with
    its search document: the function's name, docstring and the skill's description, its typed
    parameters, the skill's name in the place of a tool's server."""
    try:
        module = ast.parse(skill.source)
    except SyntaxError:  # approved sources parse; a damaged one is simply not searchable
        return ()
    found: list[SkillFunctionDoc] = []
    for node in module.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("_"):
            continue
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params += [a for a in (args.vararg, args.kwarg) if a is not None]
        typed = tuple((p.arg, ast.unparse(p.annotation) if p.annotation else "") for p in params)
        doc = ast.get_docstring(node) or ""
        document = SearchDocument(
            key=f"skills.{skill.name}.{node.name}",
            server=skill.name,
            name=node.name,
            title=None,
            description=f"{doc}\n{skill.summary}",
            parameters=typed,
            outputs=(("returns", ast.unparse(node.returns)),) if node.returns is not None else (),
        )
        found.append(SkillFunctionDoc(skill.name, node.name, function_signature(node), doc, document))
    return tuple(found)


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
