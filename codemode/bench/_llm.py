"""A real model in place of the scripted agents: ``--model anthropic:NAME`` or ``openai:NAME``.

The model gets the same system text, tools and conversation as the accounting counts, over the
provider's HTTP API (``httpx``, from the ``bench`` extra; a client can be injected: that is how a
run is recorded, and how a recorded run is replayed without a network, see ``_recording`` and
``_replay``). Its final text is the answer (see :func:`parse_answer`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from codemode.bench._model import Final, Message, Reply, ToolCall, Turn
from codemode.bench._runner import SYSTEM
from codemode.engine import render_definition

if TYPE_CHECKING:
    import httpx

ENDPOINTS = {
    "anthropic": "https://api.anthropic.com/v1/messages",
    "openai": "https://api.openai.com/v1/chat/completions",
}
KEYS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
MAX_TOKENS = 4096
TIMEOUT_S = 300


class ModelError(Exception):
    """The model spec is wrong, its key is missing, or the API answered with an error."""


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    name: str

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        provider, sep, name = text.partition(":")
        if not sep or provider not in ENDPOINTS or not name:
            raise ModelError(f"--model must be anthropic:NAME or openai:NAME, not {text!r}")
        return cls(provider, name)

    def key(self, environ: Mapping[str, str] | None = None) -> str:
        env = os.environ if environ is None else environ
        key = env.get(KEYS[self.provider], "")
        if not key:
            raise ModelError(f"--model {self.provider}:{self.name} needs {KEYS[self.provider]} to be set")
        return key


_NUMBER = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?![\w-])")


def parse_answer(text: str) -> Any:
    """The answer in a model's final text: its first JSON object or array (tasks ask for JSON),
    else its first standalone number (not the digits of an id like CUST-0042), else the text."""
    decoder = json.JSONDecoder()
    stripped = text.strip()
    for i, ch in enumerate(stripped):
        if ch in "{[":
            try:
                return decoder.raw_decode(stripped[i:])[0]
            except ValueError:
                continue
    number = _NUMBER.search(stripped)
    if number is not None:
        return json.loads(number.group())
    return stripped


class ModelAgent:
    """Callable like a scripted agent: history in, next turn out."""

    def __init__(
        self, spec: ModelSpec, tools: list[dict[str, Any]], key: str, *, client: httpx.Client | None = None
    ) -> None:
        self.spec = spec
        self.tools = tools
        """In the OpenAI function shape (what the runner offers); converted for Anthropic."""
        self._key = key
        if client is None:
            try:
                import httpx
            except ImportError as exc:  # httpx comes with the 'bench' extra
                raise ModelError("--model needs httpx: pip install 'codemode[bench]'") from exc
            client = httpx.Client(timeout=TIMEOUT_S)
        self._client = client
        self.usage: list[dict[str, int]] = []
        """Token usage as the API reported it, per request (next to our own count)."""

    def __call__(self, history: list[Message]) -> Reply:
        if self.spec.provider == "anthropic":
            return self._anthropic(history)
        return self._openai(history)

    def _post(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        response = self._client.post(ENDPOINTS[self.spec.provider], json=body, headers=headers)
        if response.status_code != 200:
            raise ModelError(f"{self.spec.provider} answered {response.status_code}: {response.text[:300]}")
        data: dict[str, Any] = response.json()
        return data

    def _anthropic(self, history: list[Message]) -> Reply:
        messages: list[dict[str, Any]] = []
        for m in history:
            if m["role"] == "user":
                messages.append({"role": "user", "content": m["content"]})
            elif m["role"] == "assistant":
                blocks: list[dict[str, Any]] = (
                    [{"type": "text", "text": m["content"]}] if m.get("content") else []
                )
                tool_calls: list[dict[str, Any]] = m.get("tool_calls") or []
                blocks += [
                    {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
                    for c in tool_calls
                ]
                messages.append({"role": "assistant", "content": blocks})
            else:
                result = {
                    "type": "tool_result",
                    "tool_use_id": m["tool_call_id"],
                    "content": m["content"],
                    "is_error": bool(m.get("is_error")),
                }
                if messages and messages[-1]["role"] == "user" and isinstance(messages[-1]["content"], list):
                    messages[-1]["content"].append(result)
                else:
                    messages.append({"role": "user", "content": [result]})
        tools = [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"],
            }
            for t in self.tools
        ]
        body = {
            "model": self.spec.name,
            "max_tokens": MAX_TOKENS,
            "system": SYSTEM,
            "tools": tools,
            "messages": messages,
        }
        data = self._post(body, {"x-api-key": self._key, "anthropic-version": "2023-06-01"})
        usage: dict[str, Any] = data.get("usage") or {}
        self.usage.append(
            {"input": int(usage.get("input_tokens", 0)), "output": int(usage.get("output_tokens", 0))}
        )
        content: list[dict[str, Any]] = data.get("content") or []
        text = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
        calls = tuple(
            ToolCall(str(b["name"]), dict(b.get("input") or {}))
            for b in content
            if b.get("type") == "tool_use"
        )
        return Turn(calls, text) if calls else Final(parse_answer(text), text)

    def _openai(self, history: list[Message]) -> Reply:
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for m in history:
            if m["role"] == "assistant":
                entry: dict[str, Any] = {"role": "assistant", "content": m.get("content") or None}
                if m.get("tool_calls"):
                    entry["tool_calls"] = [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                        }
                        for c in m["tool_calls"]
                    ]
                messages.append(entry)
            elif m["role"] == "tool":
                messages.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]})
            else:
                messages.append({"role": "user", "content": m["content"]})
        data = self._post(
            {"model": self.spec.name, "messages": messages, "tools": self.tools},
            {"Authorization": f"Bearer {self._key}"},
        )
        usage: dict[str, Any] = data.get("usage") or {}
        self.usage.append(
            {"input": int(usage.get("prompt_tokens", 0)), "output": int(usage.get("completion_tokens", 0))}
        )
        message: dict[str, Any] = data["choices"][0]["message"]
        text = str(message.get("content") or "")
        wire_calls: list[dict[str, Any]] = message.get("tool_calls") or []
        calls = tuple(
            ToolCall(
                str(c["function"]["name"]),
                cast(dict[str, Any], json.loads(c["function"]["arguments"] or "{}")),
            )
            for c in wire_calls
        )
        return Turn(calls, text) if calls else Final(parse_answer(text), text)


# -- reading a request body back (a replay of a recorded run) ---------------------------------


def offered_tools(provider: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tools a request offered, in the OpenAI function shape the runner offers them in."""
    tools: list[dict[str, Any]] = list(body.get("tools") or [])
    if provider == "anthropic":
        return [
            render_definition(
                str(t["name"]), str(t.get("description", "")), dict(t["input_schema"]), "openai"
            )
            for t in tools
        ]
    return tools


def sent_tool_results(provider: str, body: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """The tool results a request carried, by tool call id: their text and whether each was an
    error (the OpenAI shape does not say: False)."""
    found: dict[str, tuple[str, bool]] = {}
    messages: list[dict[str, Any]] = list(body.get("messages") or [])
    for message in messages:
        if provider == "openai":
            if message.get("role") == "tool":
                found[str(message["tool_call_id"])] = (str(message.get("content") or ""), False)
            continue
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in cast(list[dict[str, Any]], content):
            if block.get("type") == "tool_result":
                found[str(block["tool_use_id"])] = (
                    str(block.get("content") or ""),
                    bool(block.get("is_error")),
                )
    return found
