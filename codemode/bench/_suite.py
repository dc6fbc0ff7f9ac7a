"""The suite: start the engine once on the configured servers (the bundled examples by default),
run every task in both modes, and collect the results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from codemode.bench._accounting import Tokenizer, compact
from codemode.bench._model import Message, Mode, Reply
from codemode.bench._runner import direct_definitions, engine_ledger, run_task
from codemode.bench._skillrun import approve_proposal, require_free, withdraw
from codemode.bench._taskrun import TaskRun
from codemode.bench._tasks import Task, TaskError
from codemode.broker import ApprovalAnswer, ApprovalRequest, CallbackApprover
from codemode.catalog import Pins
from codemode.config import BackendChoice, Config, load_config, starter_config
from codemode.engine import CodeMode
from codemode.host import ConnectionState, McpHost

MODES: tuple[Mode, ...] = ("direct", "codemode", "skills")
"""``skills`` runs only for a skills task (one with ``SKILL``)."""
Progress = Callable[[str], None]
AgentFactory = Callable[[Task, Mode, int, list[dict[str, Any]]], Callable[[list[Message]], Reply]]
"""Makes the agent for one task, mode and trial, given the tools the mode offers (a real model
needs them)."""


class ServerStartError(Exception):
    """A configured server did not start, so the benchmark cannot run against it."""


def write_demo_config(directory: Path, servers: dict[str, Any]) -> Path:
    """A config for the bundled example servers, with the ledger in ``directory``."""
    path = directory / "codemode.toml"
    path.write_text(
        starter_config(servers, dict.fromkeys(servers, "bundled example server")), encoding="utf-8"
    )
    return path


async def sync_and_approve(config: Config) -> None:
    """Record every tool in the lock file and approve it: a benchmark runs what it was given."""
    async with McpHost(config) as host:
        failed = [s for s in host.statuses() if s.state is ConnectionState.FAILED]
        if failed:
            raise ServerStartError("; ".join(f"{s.name}: {s.error}" for s in failed))
        catalogs = host.catalogs()
    pins = Pins(config.lock_path)
    pins.record_all(catalogs)
    pins.approve()


async def _approve(request: ApprovalRequest) -> ApprovalAnswer:
    return ApprovalAnswer(approved=True, approver="bench", reason="codemode bench approves its tasks' writes")


@dataclass
class SuiteResult:
    runs: list[TaskRun] = field(default_factory=lambda: [])
    backend: str = ""
    tools: int = 0
    tools_by_server: dict[str, int] = field(default_factory=lambda: {})
    direct_definition_tokens: int = 0
    codemode_definition_tokens: int = 0
    catalog: list[tuple[str, dict[str, Any]]] = field(default_factory=lambda: [])
    """The configured servers' tools (``server``, MCP tool shape): the base of the catalog series."""
    skipped: dict[str, str] = field(default_factory=lambda: {})
    """Tasks not run, and why."""


SCRIPTED_SKILLS = (
    "a skills task runs with its scripted agents only: one real-model conversation per task, mode "
    "and trial cannot save a skill and then reuse it in further conversations"
)


async def run_suite(
    config_path: Path,
    tasks: list[Task],
    *,
    tokenizer: Tokenizer,
    backend: BackendChoice | None = None,
    sync: bool = True,
    modes: tuple[Mode, ...] = MODES,
    trials: int = 1,
    agents: AgentFactory | None = None,
    progress: Progress | None = None,
    on_start: Callable[[str], None] | None = None,
    on_run: Callable[[TaskRun], None] | None = None,
) -> SuiteResult:
    """Run ``tasks`` x ``modes`` x ``trials`` against the servers of ``config_path``.
    ``on_start`` hears the sandbox backend once the engine is up, ``on_run`` each run as it ends."""
    config = load_config(config_path)
    if sync:
        await sync_and_approve(config)
    approver = CallbackApprover(_approve, name="bench")
    result = SuiteResult()
    failure: TaskError | None = None
    async with CodeMode(config, backend=backend, approver=approver, measure_tokens=True) as engine:
        result.backend = engine.backend
        if on_start is not None:
            on_start(engine.backend)
        result.tools_by_server = engine.server_index()
        result.tools = sum(result.tools_by_server.values())
        result.catalog = [
            (
                t.server,
                {"name": t.name, "description": t.description or "", "inputSchema": dict(t.input_schema)},
            )
            for t in engine.tree.tools()
        ]
        result.direct_definition_tokens = tokenizer.count(compact(direct_definitions(engine)))
        result.codemode_definition_tokens = tokenizer.count(compact(engine.tool_definitions("openai")))
        try:
            await _run_tasks(engine, tasks, result, modes, trials, tokenizer, agents, progress, on_run)
        except TaskError as exc:
            failure = exc
    if failure is not None:
        # Raised once the engine is down: from inside, it would come wrapped in its task group.
        raise failure
    return result


async def _run_tasks(
    engine: CodeMode,
    tasks: list[Task],
    result: SuiteResult,
    modes: tuple[Mode, ...],
    trials: int,
    tokenizer: Tokenizer,
    agents: AgentFactory | None,
    progress: Progress | None,
    on_run: Callable[[TaskRun], None] | None,
) -> None:
    for task in tasks:
        if task.skill and agents is not None:
            result.skipped[task.name] = SCRIPTED_SKILLS
            continue
        chosen: list[Mode] = [m for m in task.modes if m in modes]
        for trial in range(trials):
            for mode in chosen:
                agent = task.agents[mode]
                if agents is not None:
                    offered = direct_definitions(engine) if mode == "direct" else engine.tool_definitions()
                    agent = agents(task, mode, trial, offered)
                for run in await _jobs(engine, task, mode, agent, tokenizer, trial):
                    run.api_usage = list(getattr(agent, "usage", []))
                    result.runs.append(run)
                    if on_run is not None:
                        on_run(run)
                if progress is not None:
                    progress(f"{task.name} [{mode}]")


async def _jobs(
    engine: CodeMode,
    task: Task,
    mode: Mode,
    agent: Callable[[list[Message]], Reply],
    tokenizer: Tokenizer,
    trial: int,
) -> list[TaskRun]:
    """Every job of ``task`` in ``mode``, in order. In ``skills`` mode the first job's proposal is
    approved before the variations run, and withdrawn once they are done."""
    ledger = engine_ledger(engine)
    skill = task.skill if mode == "skills" else None
    if skill is not None:
        require_free(engine, ledger, skill, task.name)
    runs: list[TaskRun] = []
    try:
        for index, job in enumerate(task.jobs):
            run = await run_task(
                engine,
                name=task.name,
                prompt=job.prompt,
                mode=mode,
                agent=agent,
                check=job.check,
                tokenizer=tokenizer,
                trial=trial,
                job=index,
            )
            run.refrained = task.refrained(run.tool_calls, run.mcp_calls)
            runs.append(run)
            if skill is not None and index == 0:
                await anyio.to_thread.run_sync(approve_proposal, engine, ledger, skill)
    finally:
        if skill is not None:
            await anyio.to_thread.run_sync(withdraw, engine, ledger, skill)
    return runs
