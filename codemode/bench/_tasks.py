"""Loading tasks: each is a Python file defining ``PROMPT``, ``direct_agent(history)``,
``codemode_agent(history)`` and ``check(answer)`` (see the README's "Token-cost experiments").

Optional: ``KIND`` (one line saying what the task exercises) and ``NEEDS_CALLS``, the most MCP
tool calls a right answer needs. A task with it is also scored on whether each mode refrained:
with ``NEEDS_CALLS = 0`` the model should call no tool at all (not even to search), with ``1``
make at most one MCP call."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from codemode.bench._model import Message, Mode, Reply

BUNDLED = Path(__file__).resolve().parent / "tasks"


class TaskError(Exception):
    """A task file is missing or lacks one of the names a task must define."""


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
    return Task(
        name=path.stem,
        prompt=str(module.PROMPT),
        agents={
            "direct": cast(Callable[[list[Message]], Reply], module.direct_agent),
            "codemode": cast(Callable[[list[Message]], Reply], module.codemode_agent),
        },
        check=cast(Callable[[Any], bool], module.check),
        path=path,
        kind=str(getattr(module, "KIND", "")),
        needs_calls=_needs_calls(path, getattr(module, "NEEDS_CALLS", None)),
    )


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
