"""``--replay FILE``: re-score a recorded real-model run offline, with no API key, no server and no
sandbox. Each recorded run is driven again through the same conversation loop and the same
model client as a live one: the client's transport answers with the recorded replies, and each
tool call gets the result the recording shows was sent back to the model. So the tokens are
counted again, the answer parsed again and the task's check applied again; what only the live
run could measure (MCP calls and gate decisions, times, sandbox and broker use) is taken as
recorded.

Every request the client builds must equal the recorded one, byte for byte once parsed: the
replay stops with an error where the task files, the system text or the tool definitions are not
the ones the run was recorded with, rather than count a conversation that was never sent.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, cast

import httpx
from pydantic import TypeAdapter, ValidationError

from codemode._version import codemode_version
from codemode.bench._accounting import Accountant, Tokenizer, compact
from codemode.bench._llm import ModelAgent, ModelSpec, offered_tools, sent_tool_results
from codemode.bench._model import ToolCall
from codemode.bench._recording import Exchange, Recording, ReplayError, RunKey
from codemode.bench._runner import SEPARATOR, SYSTEM, Execute, Executed, converse
from codemode.bench._suite import SuiteResult
from codemode.bench._taskrun import MEASURED, TaskRun
from codemode.bench._tasks import Task

_TASK_RUN: TypeAdapter[TaskRun] = TypeAdapter(TaskRun)


def _label(key: RunKey) -> str:
    task, mode, trial = key
    return f"{task} [{mode}] trial {trial}"


class ReplayTransport(httpx.BaseTransport):
    """Answers one run's requests with its recorded replies, each only to the request that was
    recorded with it."""

    def __init__(self, key: RunKey, exchanges: list[Exchange]) -> None:
        self._key = key
        self._exchanges = exchanges
        self.served = 0
        self.mismatch: str | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        number = self.served + 1
        if self.served >= len(self._exchanges):
            self.mismatch = (
                f"{_label(self._key)}: the model is asked a request {number} the recording does not "
                f"hold (it holds {len(self._exchanges)})"
            )
            raise ReplayError(self.mismatch)
        recorded = self._exchanges[self.served]
        where = first_difference(recorded.request, json.loads(request.content))
        if where is not None:
            self.mismatch = (
                f"{_label(self._key)}, request {number}: it differs from the recorded one at {where}"
            )
            raise ReplayError(self.mismatch)
        self.served += 1
        if isinstance(recorded.response, str):
            return httpx.Response(recorded.status, text=recorded.response)
        return httpx.Response(recorded.status, json=recorded.response)

    def unfinished(self) -> str | None:
        """Why the replay of this run does not match the recording, if it does not."""
        if self.mismatch is None and self.served < len(self._exchanges):
            recorded = len(self._exchanges)
            return f"{_label(self._key)}: the run ended after {self.served} of {recorded} recorded requests"
        return self.mismatch


def first_difference(recorded: Any, sent: Any, where: str = "the body") -> str | None:
    """Where ``sent`` first differs from ``recorded`` (a JSON path), or None when they are equal."""
    if isinstance(recorded, dict) and isinstance(sent, dict):
        recorded_map = cast(dict[str, Any], recorded)
        sent_map = cast(dict[str, Any], sent)
        for name in list(recorded_map) + [k for k in sent_map if k not in recorded_map]:
            if name not in recorded_map or name not in sent_map:
                return f"{where}.{name} ({'not recorded' if name not in recorded_map else 'not sent'})"
            found = first_difference(recorded_map[name], sent_map[name], f"{where}.{name}")
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(sent, list):
        recorded_list = cast(list[Any], recorded)
        sent_list = cast(list[Any], sent)
        for i, (a, b) in enumerate(zip(recorded_list, sent_list, strict=False)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found is not None:
                return found
        if len(recorded_list) != len(sent_list):
            return f"{where} ({len(recorded_list)} items recorded, {len(sent_list)} sent)"
        return None
    return None if recorded == sent else where


async def replay_suite(recording: Recording, tasks: list[Task], tokenizer: Tokenizer) -> SuiteResult:
    """Every run of ``recording`` whose task is in ``tasks``, re-scored."""
    spec = ModelSpec.parse(recording.header.model)
    by_name = {task.name: task for task in tasks}
    result = SuiteResult(backend=recording.header.backend)
    mismatches: list[str] = []
    for key, exchanges in recording.exchanges.items():
        task = by_name.get(key[0])
        if task is None:
            continue
        measured = recording.measured.get(key)
        if measured is None:
            raise ReplayError(
                f"{recording.path} has no run line for {_label(key)}: the recording stopped before "
                "the run ended. Replay the runs it holds in full with --task NAME"
            )
        tools = offered_tools(spec.provider, exchanges[0].request)
        transport = ReplayTransport(key, exchanges)
        agent = ModelAgent(spec, tools, "replay", client=httpx.Client(transport=transport))
        run = TaskRun(task=key[0], mode=key[1], passed=False, answer="", error=None, trial=key[2])
        await converse(
            run,
            prompt=task.prompt,
            agent=agent,
            execute=_recorded_results(spec.provider, exchanges),
            check=task.check,
            accountant=Accountant(tokenizer, SYSTEM, tools),
        )
        mismatch = transport.unfinished()
        if mismatch is not None:
            mismatches.append(mismatch)
            continue
        run = _with_measured(recording, key, run, measured)
        run.refrained = task.refrained(run.tool_calls, run.mcp_calls)
        run.api_usage = list(agent.usage)
        result.runs.append(run)
    if mismatches:
        raise ReplayError(
            f"{recording.path} does not replay as it was recorded:\n- "
            + "\n- ".join(mismatches)
            + f"\nThe task files, the system text or the tool definitions are not the ones it was recorded "
            f"with (codemode {recording.header.codemode}; this is {codemode_version()}): replay it with "
            "that version, and --tasks DIR with the task files it ran"
        )
    _describe_tools(recording, result, tokenizer)
    return result


def _recorded_results(provider: str, exchanges: list[Exchange]) -> Execute:
    """Each tool call's result as the recorded requests sent it back to the model."""
    results: dict[str, tuple[str, bool]] = {}
    for exchange in exchanges:
        results |= sent_tool_results(provider, exchange.request)

    async def execute(tool_call: ToolCall, call_id: str) -> Executed:
        # A call whose result was never sent (the run stopped right after it) gets an empty
        # one: no request carries it, so no token of it was counted either.
        return Executed(*results.get(call_id, ("", False)))

    return execute


def _with_measured(recording: Recording, key: RunKey, run: TaskRun, measured: dict[str, Any]) -> TaskRun:
    data = asdict(run) | {name: value for name, value in measured.items() if name in MEASURED}
    try:
        return _TASK_RUN.validate_python(data)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise ReplayError(
            f"{recording.path}: the run line of {_label(key)} has a bad {where}: {problem['msg']}"
        ) from None


def _describe_tools(recording: Recording, result: SuiteResult, tokenizer: Tokenizer) -> None:
    """The catalog and definition sizes, from the tools the recorded requests offered."""
    offered: dict[str, list[dict[str, Any]]] = {}
    for (_, mode, _), exchanges in recording.exchanges.items():
        offered.setdefault(mode, offered_tools(recording.provider, exchanges[0].request))
    direct = offered.get("direct", [])
    for definition in direct:
        function: dict[str, Any] = definition["function"]
        server, _, tool = str(function["name"]).partition(SEPARATOR)
        result.catalog.append(
            (
                server,
                {"name": tool, "description": function["description"], "inputSchema": function["parameters"]},
            )
        )
        result.tools_by_server[server] = result.tools_by_server.get(server, 0) + 1
    result.tools = len(direct)
    result.direct_definition_tokens = tokenizer.count(compact(direct)) if direct else 0
    codemode = offered.get("codemode", [])
    result.codemode_definition_tokens = tokenizer.count(compact(codemode)) if codemode else 0
