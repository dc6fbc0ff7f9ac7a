"""Run one task in one mode against a live engine, counting every request as an API bills it.

Direct mode offers the model every MCP tool (``server__tool``) and executes each call through
:meth:`CodeMode.call_tool`, so it is gated and recorded in the ledger like any other call. Code
mode offers ``run_code`` plus the discovery tools and executes them through the engine, its
sandbox and broker (:meth:`CodeMode.handle_tool_call`). The ``skills`` mode is code mode whose
tree has a skill saved by an earlier job of the same task (see ``_suite``).

The conversation itself (:func:`converse`) only knows an agent and a way to execute its calls:
a replay of a recorded run (``_replay``) drives it with the recorded tool results instead.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from codemode.bench._accounting import Accountant, Tokenizer, TurnCost
from codemode.bench._gates import gate_stats
from codemode.bench._model import Final, Message, Mode, Reply, ToolCall
from codemode.bench._taskrun import TaskRun
from codemode.calls import CallDenied, CallFailed, ToolError, ToolResult
from codemode.engine import CodeMode, RunResult, render_definition, undo_standing
from codemode.ledger import CallRecord, Ledger

SYSTEM = (
    "You are an assistant that completes the user's request with the tools provided. "
    "Use the tools, then give the final answer."
)
MAX_TURNS = 40
SEPARATOR = "__"
DISCOVERY_TOOLS = frozenset({"search_tools", "list_files", "read_file"})
"""Code mode's tools that find tools; ``run_code`` is the one that does the work."""


@dataclass(frozen=True)
class Executed:
    """One executed tool call: the text the model gets, and the sandbox run behind it (if any)."""

    text: str
    is_error: bool = False
    run: RunResult | None = None


Execute = Callable[[ToolCall, str], Awaitable[Executed]]
"""Executes one of the model's tool calls (given with its id in the conversation)."""


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


async def _execute(engine: CodeMode, mode: Mode, tool_call: ToolCall) -> Executed:
    if mode != "direct":
        reply = await engine.handle_tool_call(tool_call.name, tool_call.arguments)
        return Executed(reply.text, reply.is_error, reply.run)
    # Every direct call goes to the broker, a name that is no ``server__tool`` too: its tool gate
    # refuses it and the ledger records the refusal, as it would a program's call of no tool.
    server, sep, tool = tool_call.name.partition(SEPARATOR)
    if not sep:
        server, tool = "", tool_call.name
    outcome = await engine.call_tool(server, tool, tool_call.arguments, purpose="bench:direct")
    return Executed(*_outcome_text(outcome))


def engine_ledger(engine: CodeMode) -> Ledger:
    ledger = engine._ledger  # pyright: ignore[reportPrivateUsage]  # the engine's own ledger
    assert ledger is not None
    return ledger


def _ledger_rows(engine: CodeMode) -> list[CallRecord]:
    return engine_ledger(engine).list_calls(limit=10_000_000)


def _tally_compensation(run: TaskRun, ledger: Ledger, failed_runs: list[str]) -> None:
    """How the task's failed sandbox runs stand, from the ledger as batch reads its items: those
    that left side effects needed compensation, and those whose effects are all undone had it."""
    for run_id in failed_runs:
        standing = undo_standing(ledger, run_id)
        if standing == "nothing to undo":
            continue
        run.compensation_needed += 1
        run.compensated += standing == "compensated"


async def converse(
    run: TaskRun,
    *,
    prompt: str,
    agent: Callable[[list[Message]], Reply],
    execute: Execute,
    check: Callable[[Any], bool],
    accountant: Accountant,
    max_turns: int = MAX_TURNS,
) -> None:
    """Drive ``agent`` until it answers (or fails), filling in ``run``: its tokens turn by turn,
    its answer and check, where the wall time went, and the sandbox runs its calls made. A
    failure is a result, never an exception."""
    history: list[Message] = [{"role": "user", "content": prompt}]
    started = time.perf_counter()
    try:
        for _ in range(max_turns):
            breakdown = accountant.request(history)
            turn_start = time.perf_counter()
            reply = await anyio.to_thread.run_sync(lambda: agent(list(history)))
            run.model_s += time.perf_counter() - turn_start
            if isinstance(reply, Final):
                message: Message = {"role": "assistant", "content": reply.text or _answer_text(reply.answer)}
                run.turns.append(_cost(accountant, breakdown, message, 0, turn_start))
                run.answer = _answer_text(reply.answer)[:500]
                run.passed = bool(check(reply.answer))
                if not run.passed:
                    run.error = "check failed"
                break
            calls: list[dict[str, Any]] = [
                {"id": f"call_{len(history)}_{i}", "name": c.name, "arguments": c.arguments}
                for i, c in enumerate(reply.calls)
            ]
            message = {"role": "assistant", "content": reply.text, "tool_calls": calls}
            history.append(message)
            for tool_call, wire in zip(reply.calls, calls, strict=True):
                call_start = time.perf_counter()
                executed = await execute(tool_call, wire["id"])
                spent = time.perf_counter() - call_start
                if run.mode == "codemode" and tool_call.name in DISCOVERY_TOOLS:
                    run.discovery_s += spent
                else:
                    run.execution_s += spent
                if executed.run is not None:
                    run.add_run(executed.run)
                history.append(
                    {
                        "role": "tool",
                        "tool_call_id": wire["id"],
                        "name": tool_call.name,
                        "content": executed.text,
                        "is_error": executed.is_error,
                    }
                )
            run.tool_calls += len(calls)
            run.turns.append(_cost(accountant, breakdown, message, len(calls), turn_start))
        else:
            run.error = f"no answer after {max_turns} turns"
    except Exception as exc:  # a broken agent or check fails its task, and the suite goes on
        run.error = f"{type(exc).__name__}: {exc}"
        run.answer = traceback.format_exc(limit=3)[-500:]
    # To the microsecond: a quick search rounded to the millisecond would read as no discovery.
    run.wall_s = round(time.perf_counter() - started, 6)
    run.model_s, run.discovery_s = round(run.model_s, 6), round(run.discovery_s, 6)
    run.execution_s = round(run.execution_s, 6)


async def run_task(
    engine: CodeMode,
    *,
    name: str,
    prompt: str,
    mode: Mode,
    agent: Callable[[list[Message]], Reply],
    check: Callable[[Any], bool],
    tokenizer: Tokenizer,
    max_turns: int = MAX_TURNS,
    trial: int = 0,
    job: int = 0,
) -> TaskRun:
    """One task in one mode against ``engine``: the conversation, then what the broker's gates
    decided about its MCP calls (from the ledger rows the task added), and whether the sandbox
    runs that failed after side effects had them undone."""
    tools = direct_definitions(engine) if mode == "direct" else engine.tool_definitions("openai")
    run = TaskRun(task=name, mode=mode, passed=False, answer="", error=None, trial=trial, job=job)
    run.no_sandbox()
    run.broker_cpu_s = 0.0 if mode == "codemode" else None
    before = {row.call_id for row in await anyio.to_thread.run_sync(lambda: _ledger_rows(engine))}

    failed_runs: list[str] = []

    async def execute(tool_call: ToolCall, call_id: str) -> Executed:
        executed = await _execute(engine, mode, tool_call)
        if executed.run is not None and (executed.run.status == "error" or executed.run.verified is False):
            failed_runs.append(executed.run.run_id)
        return executed

    await converse(
        run,
        prompt=prompt,
        agent=agent,
        execute=execute,
        check=check,
        accountant=Accountant(tokenizer, SYSTEM, tools),
        max_turns=max_turns,
    )
    rows = await anyio.to_thread.run_sync(lambda: _ledger_rows(engine))
    stats = gate_stats(row for row in rows if row.call_id not in before)
    run.mcp_calls, run.calls_denied, run.denied = stats.attempted, stats.denials, dict(stats.denied)
    run.arguments_checked, run.arguments_denied = stats.arguments_checked, stats.arguments_denied
    await anyio.to_thread.run_sync(_tally_compensation, run, engine_ledger(engine), failed_runs)
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
