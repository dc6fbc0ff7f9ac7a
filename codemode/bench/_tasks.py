"""Loading tasks: each is a Python file defining ``PROMPT``, ``direct_agent(history)``,
``codemode_agent(history)`` and ``check(answer)`` (see the README's "Token-cost experiments").

Optional: ``KIND`` (one line saying what the task exercises) and ``NEEDS_CALLS``, the most MCP
tool calls a right answer needs. A task with it is also scored on whether each mode refrained:
with ``NEEDS_CALLS = 0`` the model should call no tool at all (not even to search), with ``1``
make at most one MCP call.

A skills task also defines ``SKILL`` (the name its first job saves a skill as), ``VARIATIONS``
(more prompts, solved with that skill) and ``skills_agent(history)``; its ``check(answer,
prompt)`` is told which job it checks. It runs every job in each mode, and in a third,
``skills``: the first job proposes the skill, the bench approves it (as the person reviewing
it), and the variations import it."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

from codemode.bench._model import Message, Mode, Reply

BUNDLED = Path(__file__).resolve().parent / "tasks"


class TaskError(Exception):
    """A task file is missing or lacks one of the names a task must define."""


@dataclass(frozen=True)
class Job:
    """One conversation of a task: its prompt and the check of its answer."""

    prompt: str
    check: Callable[[Any], bool]


@dataclass(frozen=True)
class Task:
    name: str
    prompt: str
    agents: dict[Mode, Callable[[list[Message]], Reply]]
    check: Callable[[Any], bool]
    path: Path
    kind: str = ""
    """One line saying what the task exercises (the module's ``KIND``, optional)."""
    needs_calls: int | None = None
    """The most MCP calls a right answer needs (the module's ``NEEDS_CALLS``, optional)."""
    skill: str | None = None
    """A skills task's skill (the module's ``SKILL``): its first job saves it, the rest reuse it."""
    variations: tuple[Job, ...] = ()

    @property
    def jobs(self) -> tuple[Job, ...]:
        """The task's conversations in order: its prompt, then any variations."""
        return (Job(self.prompt, self.check), *self.variations)

    @property
    def modes(self) -> tuple[Mode, ...]:
        return ("direct", "codemode", "skills") if self.skill else ("direct", "codemode")

    def refrained(self, tool_calls: int, mcp_calls: int) -> bool | None:
        """Whether a run kept to what the answer needs: no tool call of any kind when it needs
        none (a search is a call the model should not have made), else at most ``needs_calls``
        MCP calls. None for a task that does not say what it needs."""
        if self.needs_calls is None:
            return None
        if self.needs_calls == 0:
            return tool_calls == 0
        return mcp_calls <= self.needs_calls


def load_task(path: Path) -> Task:
    spec = importlib.util.spec_from_file_location(f"codemode_bench_task_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise TaskError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [n for n in ("PROMPT", "direct_agent", "codemode_agent", "check") if not hasattr(module, n)]
    if missing:
        raise TaskError(f"{path}: a task must define {', '.join(missing)}")
    agents: dict[Mode, Callable[[list[Message]], Reply]] = {
        "direct": cast(Callable[[list[Message]], Reply], module.direct_agent),
        "codemode": cast(Callable[[list[Message]], Reply], module.codemode_agent),
    }
    check = cast(Callable[..., bool], module.check)
    skill, variations = None, ()
    if hasattr(module, "SKILL"):
        skill, variations = _skills_task(path, module, check)
        agents["skills"] = cast(Callable[[list[Message]], Reply], module.skills_agent)
        check = partial(check, prompt=str(module.PROMPT))
    return Task(
        name=path.stem,
        prompt=str(module.PROMPT),
        agents=agents,
        check=check,
        path=path,
        kind=str(getattr(module, "KIND", "")),
        needs_calls=_needs_calls(path, getattr(module, "NEEDS_CALLS", None)),
        skill=skill,
        variations=variations,
    )


def _skills_task(path: Path, module: Any, check: Callable[..., bool]) -> tuple[str, tuple[Job, ...]]:
    """A skills task's skill name and variations, each checked as ``check(answer, prompt)``."""
    missing = [n for n in ("VARIATIONS", "skills_agent") if not hasattr(module, n)]
    if missing:
        raise TaskError(f"{path}: a skills task (one with SKILL) must define {', '.join(missing)} too")
    skill, prompts = module.SKILL, module.VARIATIONS
    if not isinstance(skill, str) or not skill.isidentifier():
        raise TaskError(f"{path}: SKILL must name the skill as a Python identifier, not {skill!r}")
    if not isinstance(prompts, list | tuple) or not prompts or not all(isinstance(p, str) for p in prompts):  # pyright: ignore[reportUnknownVariableType]
        raise TaskError(f"{path}: VARIATIONS must be a non-empty list of prompts (str)")
    jobs = tuple(Job(p, partial(check, prompt=p)) for p in cast(list[str], prompts))
    return skill, jobs


def _needs_calls(path: Path, value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise TaskError(f"{path}: NEEDS_CALLS must be a whole number of MCP calls (0 or more), not {value!r}")
    return value


def load_tasks(directory: Path | None = None, only: list[str] | None = None) -> list[Task]:
    """Every ``*.py`` in ``directory`` (default: the bundled suite) not starting with ``_``."""
    folder = directory or BUNDLED
    paths = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    if only:
        paths = [p for p in paths if p.stem in only]
        unknown = set(only) - {p.stem for p in paths}
        if unknown:
            raise TaskError(f"no such task in {folder}: {', '.join(sorted(unknown))}")
    if not paths:
        raise TaskError(f"no task files (*.py) in {folder}")
    return [load_task(p) for p in paths]
