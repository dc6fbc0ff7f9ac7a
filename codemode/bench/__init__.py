"""``codemode bench``: token-cost experiments that run direct tool calling and code mode for real
on the same tasks and servers (see the README, "Token-cost experiments").

Task files import their helpers from here: :class:`Turn`, :class:`Final`, :func:`call`,
:func:`turn`, :func:`run_code`, :func:`search_then_run` and the history readers."""

from codemode.bench._model import (
    Agent,
    Final,
    Message,
    Mode,
    Reply,
    ToolCall,
    Turn,
    assistant_turns,
    call,
    json_results,
    run_code,
    run_code_value,
    search_then_run,
    tool_results,
    turn,
)

__all__ = [
    "Agent",
    "Final",
    "Message",
    "Mode",
    "Reply",
    "ToolCall",
    "Turn",
    "assistant_turns",
    "call",
    "json_results",
    "run_code",
    "run_code_value",
    "search_then_run",
    "tool_results",
    "turn",
]
