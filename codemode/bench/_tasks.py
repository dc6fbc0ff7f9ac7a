"""Loading tasks: each is a Python file defining ``PROMPT``, ``direct_agent(history)``,
``codemode_agent(history)`` and ``check(answer)`` (see the README's "Token-cost experiments")."""

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
    )


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
