"""``codemode bench``: token-cost experiments that run direct tool calling and code mode for real
on the same tasks and servers (see the README, "Token-cost experiments").

Task files import their helpers from here: :class:`Turn`, :class:`Final`, :func:`call`,
:func:`turn`, :func:`run_code`, :func:`search_then_run` and the history readers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

# Task files import their helpers from here, and `codemode bench` its runner: each name is
# imported on first use, so a task file does not pay for the runner (see codemode._lazy).
_EXPORTS = {
    "Agent": "codemode.bench._model",
    "Final": "codemode.bench._model",
    "Message": "codemode.bench._model",
    "Mode": "codemode.bench._model",
    "ModelError": "codemode.bench._llm",
    "Reply": "codemode.bench._model",
    "ReplayError": "codemode.bench._recording",
    "ServerStartError": "codemode.bench._suite",
    "TaskError": "codemode.bench._tasks",
    "ToolCall": "codemode.bench._model",
    "Turn": "codemode.bench._model",
    "assistant_turns": "codemode.bench._model",
    "call": "codemode.bench._model",
    "json_results": "codemode.bench._model",
    "run_bench": "codemode.bench._main",
    "run_code": "codemode.bench._model",
    "run_code_value": "codemode.bench._model",
    "search_then_run": "codemode.bench._model",
    "skills_table": "codemode.bench._skillreport",
    "terminal_table": "codemode.bench._report",
    "tool_results": "codemode.bench._model",
    "turn": "codemode.bench._model",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from codemode.bench._llm import ModelError as ModelError
    from codemode.bench._main import run_bench as run_bench
    from codemode.bench._model import Agent as Agent
    from codemode.bench._model import Final as Final
    from codemode.bench._model import Message as Message
    from codemode.bench._model import Mode as Mode
    from codemode.bench._model import Reply as Reply
    from codemode.bench._model import ToolCall as ToolCall
    from codemode.bench._model import Turn as Turn
    from codemode.bench._model import assistant_turns as assistant_turns
    from codemode.bench._model import call as call
    from codemode.bench._model import json_results as json_results
    from codemode.bench._model import run_code as run_code
    from codemode.bench._model import run_code_value as run_code_value
    from codemode.bench._model import search_then_run as search_then_run
    from codemode.bench._model import tool_results as tool_results
    from codemode.bench._model import turn as turn
    from codemode.bench._recording import ReplayError as ReplayError
    from codemode.bench._report import terminal_table as terminal_table
    from codemode.bench._skillreport import skills_table as skills_table
    from codemode.bench._suite import ServerStartError as ServerStartError
    from codemode.bench._tasks import TaskError as TaskError
