"""Run one task in one mode against a live engine, counting every request as an API bills it.

Direct mode offers the model every MCP tool (``server__tool``) and executes each call through
:meth:`CodeMode.call_tool`, so it is gated and recorded in the ledger like any other call. Code
mode offers ``run_code`` plus the discovery tools and executes them through the engine, its
sandbox and broker (:meth:`CodeMode.handle_tool_call`).
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio

from codemode.bench._accounting import Accountant, Tokenizer, TurnCost
from codemode.bench._model import Final, Message, Mode, Reply, ToolCall
from codemode.bench._sampler import SandboxSampler
from codemode.calls import CallDenied, CallFailed, ToolError, ToolResult
from codemode.engine import CodeMode, render_definition

SYSTEM = (
    "You are an assistant that completes the user's request with the tools provided. "
    "Use the tools, then give the final answer."
)
MAX_TURNS = 40
SEPARATOR = "__"


@dataclass
class TaskRun:
    task: str
    mode: Mode
    passed: bool
    answer: str
    error: str | None
    turns: list[TurnCost] = field(default_factory=lambda: [])
    tool_calls: int = 0
    """Tool calls the model made (in code mode: run_code and discovery calls)."""
    mcp_calls: int = 0
    """MCP tool calls recorded in the ledger while the task ran (in both modes)."""
    wall_s: float = 0.0
    sandbox_cpu_s: float | None = None
    sandbox_peak_mb: float | None = None
    trial: int = 0
    api_usage: list[dict[str, int]] = field(default_factory=lambda: [])
    """With a real model: the token usage its API reported, per request (next to our count)."""

    @property
    def input_tokens(self) -> int:
        return sum(t.input_tokens for t in self.turns)

    @property
    def output_tokens(self) -> int:
        return sum(t.output_tokens for t in self.turns)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["input_tokens"] = self.input_tokens
        out["output_tokens"] = self.output_tokens
        out["total_tokens"] = self.input_tokens + self.output_tokens
        return out


def direct_definitions(engine: CodeMode) -> list[dict[str, Any]]:
    """Every visible MCP tool as a function definition, the way direct tool calling offers them."""
    return [
        render_definition(
            f"{spec.server}{SEPARATOR}{spec.name}", spec.description or "", dict(spec.input_schema), "openai"
        )
        for spec in engine.tree.tools()
    ]


def _outcome_text(outcome: Any) -> tuple[str, bool]:
    """A direct call's result as the model gets it: the text content the server sent."""
    if isinstance(outcome, ToolResult):
        texts = [str(b.model_dump().get("text", "")) for b in outcome.content if b.type == "text"]
        if texts:
            return "\n".join(texts), False
        return json.dumps(outcome.structured, ensure_ascii=False), False
    if isinstance(outcome, ToolError):
        return f"error: {outcome.message}", True
    if isinstance(outcome, CallDenied):
        return f"denied by {outcome.gate}: {outcome.reason}", True
    if isinstance(outcome, CallFailed):
        return f"failed: {outcome.reason}", True
    return str(outcome), True


async def _execute(engine: CodeMode, mode: Mode, tool_call: ToolCall) -> tuple[str, bool]:
    if mode == "codemode":
        reply = await engine.handle_tool_call(tool_call.name, tool_call.arguments)
        return reply.text, reply.is_error
    server, sep, tool = tool_call.name.partition(SEPARATOR)
    if not sep:
        return f"unknown tool {tool_call.name!r}", True
    outcome = await engine.call_tool(server, tool, tool_call.arguments, purpose="bench:direct")
    return _outcome_text(outcome)


def _ledger_calls(engine: CodeMode) -> int:
    ledger = engine._ledger  # pyright: ignore[reportPrivateUsage]  # the engine's own ledger
    assert ledger is not None
    return len(ledger.list_calls(limit=10_000_000))


async def run_task(
    engine: CodeMode,
    *,
    name: str,
    prompt: str,
    mode: Mode,
    agent: Callable[[list[Message]], Reply],
    check: Callable[[Any], bool],
    tokenizer: Tokenizer,
    measure_sandbox: bool = True,
    server_args: list[list[str]] | None = None,
    max_turns: int = MAX_TURNS,
    trial: int = 0,
) -> TaskRun:
    """Drive ``agent`` until it answers (or fails); a failure is a result, never an exception."""
    tools = direct_definitions(engine) if mode == "direct" else engine.tool_definitions("openai")
    accountant = Accountant(tokenizer, SYSTEM, tools)
    history: list[Message] = [{"role": "user", "content": prompt}]
    run = TaskRun(task=name, mode=mode, passed=False, answer="", error=None, trial=trial)
    calls_before = await anyio.to_thread.run_sync(lambda: _ledger_calls(engine))
    started = time.perf_counter()
    with SandboxSampler(server_args or [], enabled=measure_sandbox) as sampler:
        try:
            for _ in range(max_turns):
                breakdown = accountant.request(history)
                turn_start = time.perf_counter()
                reply = await anyio.to_thread.run_sync(lambda: agent(list(history)))
                if isinstance(reply, Final):
                    message: Message = {
                        "role": "assistant",
                        "content": reply.text or _answer_text(reply.answer),
                    }
                    run.turns.append(_cost(accountant, breakdown, message, 0, turn_start))
                    run.answer = _answer_text(reply.answer)[:500]
                    run.passed = bool(check(reply.answer))
                    if not run.passed:
                        run.error = "check failed"
                    break
                calls = [
                    {"id": f"call_{len(history)}_{i}", "name": c.name, "arguments": c.arguments}
                    for i, c in enumerate(reply.calls)
                ]
                message = {"role": "assistant", "content": reply.text, "tool_calls": calls}
                history.append(message)
                for tool_call, wire in zip(reply.calls, calls, strict=True):
                    text, is_error = await _execute(engine, mode, tool_call)
                    history.append(
                        {
                            "role": "tool",
                            "tool_call_id": wire["id"],
                            "name": tool_call.name,
                            "content": text,
                            "is_error": is_error,
                        }
                    )
                run.tool_calls += len(calls)
                run.turns.append(_cost(accountant, breakdown, message, len(calls), turn_start))
            else:
                run.error = f"no answer after {max_turns} turns"
        except Exception as exc:  # a broken agent or check fails its task, and the suite goes on
            run.error = f"{type(exc).__name__}: {exc}"
            run.answer = traceback.format_exc(limit=3)[-500:]
    run.wall_s = round(time.perf_counter() - started, 3)
    run.sandbox_cpu_s = sampler.cpu_s if mode == "codemode" or not measure_sandbox else 0.0
    run.sandbox_peak_mb = sampler.peak_mb if mode == "codemode" or not measure_sandbox else 0.0
    calls_after = await anyio.to_thread.run_sync(lambda: _ledger_calls(engine))
    run.mcp_calls = calls_after - calls_before
    return run


def _cost(
    accountant: Accountant, breakdown: dict[str, int], message: Message, calls: int, started: float
) -> TurnCost:
    return TurnCost(
        input_tokens=sum(breakdown.values()),
        output_tokens=accountant.output(message),
        tool_calls=calls,
        wall_s=round(time.perf_counter() - started, 3),
        breakdown=breakdown,
    )


def _answer_text(answer: Any) -> str:
    return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False, default=str)
