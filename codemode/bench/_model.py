"""The shapes a benchmark conversation is made of, shared by scripted agents, real models and
the token accounting: tool calls, assistant turns, final answers and the history itself.

A history is a list of plain dicts (so task files need no imports to read it):

- ``{"role": "user", "content": str}``
- ``{"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments"}]}``
- ``{"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}``
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Mode = Literal["direct", "codemode", "skills"]
"""``skills``: code mode with the tenant's saved skills (a task that saves one, see ``_tasks``)."""
Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    name: str
    """``server__tool`` in direct mode; ``run_code``, ``search_tools``… in code mode."""
    arguments: dict[str, Any] = field(default_factory=lambda: {})


@dataclass(frozen=True)
class Turn:
    """An assistant turn that calls tools (the runner executes them and asks again)."""

    calls: tuple[ToolCall, ...]
    text: str = ""


@dataclass(frozen=True)
class Final:
    """The assistant's final answer: what ``check`` is given."""

    answer: Any
    text: str = ""


Reply = Turn | Final


def call(name: str, **arguments: Any) -> ToolCall:
    """Shorthand for task files: ``call("crm__get_customer", customer_id="CUST-0042")``."""
    return ToolCall(name, dict(arguments))


def turn(*calls: ToolCall, text: str = "") -> Turn:
    return Turn(tuple(calls), text)


def run_code(code: str) -> Turn:
    """A code-mode turn with one ``run_code`` call."""
    return Turn((ToolCall("run_code", {"code": code}),))


class Agent(Protocol):
    """Given the conversation so far, the next assistant turn (a scripted or a real model)."""

    def __call__(self, history: list[Message]) -> Reply: ...


def tool_results(history: list[Message]) -> list[str]:
    """The tool results of the latest assistant turn, in call order (for scripted agents)."""
    out: list[str] = []
    for message in reversed(history):
        if message["role"] != "tool":
            break
        out.append(str(message["content"]))
    return out[::-1]


def assistant_turns(history: list[Message]) -> int:
    return sum(1 for m in history if m["role"] == "assistant")


def json_results(history: list[Message]) -> list[Any]:
    """The latest tool results parsed as JSON (None where a result is not JSON)."""
    out: list[Any] = []
    for text in tool_results(history):
        try:
            out.append(json.loads(text))
        except ValueError:
            out.append(None)
    return out


def run_code_value(text: str) -> Any:
    """The program's value from a ``run_code`` answer (the JSON after the result marker)."""
    _, marker, rest = text.partition(" ---\n")
    body = rest.split("\n--- stdout ", 1)[0] if marker else text  # "--- stdout <boundary> ---"
    try:
        return json.loads(body)
    except ValueError:
        return body


def search_then_run(history: list[Message], query: str, program: str, *, k: int) -> Reply:
    """The plain code-mode script: search the tools, run one program, answer with its value."""
    step = assistant_turns(history)
    if step == 0:
        return turn(call("search_tools", query=query, detail="full", k=k))
    if step == 1:
        return run_code(program)
    return Final(run_code_value(tool_results(history)[0]))
