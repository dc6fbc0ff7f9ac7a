"""Long-running tool calls on 2026-07-28: the ``io.modelcontextprotocol/tasks`` extension (SEP-2663).

On 2026-07-28 tasks left the core protocol. The client declares the extension in each request's
capabilities (:class:`TasksExtension`, given to the SDK's client: the SDK advertises it on
2026-07-28 connections only, since its one result claim is active only there), and the server
decides, call by call, whether to answer a ``tools/call`` with a task handle
(``resultType: "task"``) in place of its result. The host then polls ``tasks/get`` (at the
task's ``pollIntervalMs``, within the 2025-11-25 lane's bounds) until the task is terminal; a
completed task carries the call's result inline (there is no ``tasks/result``).

What each status becomes:

=====================  ================================================================================
status                 result
=====================  ================================================================================
``completed``          the task's inline ``CallToolResult`` (a tool error stays the tool's error)
``failed``             the tool's error result (``isError``), saying the JSON-RPC error the task
                       ended with
``cancelled``          :class:`OutcomeUnknownError`: it may have partly run
``input_required``     each new input request goes to the call's :class:`InputHandler` as an
                       input request of the call itself would (the run's person answers an
                       elicitation; declined where nobody can answer), and the answers go back
                       with ``tasks/update``; a request that is refused and cannot be declined
                       (sampling where it is denied, roots where none are offered) cancels the
                       task, as do more than ``MAX_INPUT_ROUNDS`` rounds of questions: an
                       unknown outcome naming the task
=====================  ================================================================================

Time running out, the run's cancellation and a lost connection end the task as on 2025-11-25
(:func:`codemode.host._tasks.guard_task`: ``tasks/cancel``, and an unknown outcome naming the
task), and the task id is the call's receipt in the same ``_meta`` key. Over HTTP each
``tasks/*`` request names its task in ``Mcp-Name``, as the extension asks (for routing).

Which calls are long-running: on a server that declared the extension any call may become a
task, so every call of it is (:func:`may_task`): the broker lets it run for what is left of the
run's budget and holds the ledger's lease that long, as for a 2025-11-25 task tool. A plain
answer still comes within ``call_timeout``, which bounds every request on the way.

The SDK parses the handle (the claim below) but cannot follow it for codemode: following needs
the call's own input handler, time limit and progress listener, so the host does it here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Literal

import anyio
import mcp_types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from codemode.errors import OutcomeUnknownError
from codemode.host._inputs import MAX_INPUT_ROUNDS
from codemode.host._tasks import (
    CANCEL_BOUND_S,
    CallWatch,
    guard_task,
    poll_pause_s,
    send_cancel,
    task_unknown,
    with_receipt,
)

__all__ = ["TASKS_EXTENSION", "ExtTaskCalls", "TaskHandle", "TasksExtension", "may_task"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

Answer = Callable[[mcp_types.InputRequest], Awaitable[mcp_types.InputResponse | mcp_types.ErrorData]]
"""Answers one input request for the call (the connection's :meth:`InputRouter.answer`)."""

_INPUT_REQUESTS: TypeAdapter[mcp_types.InputRequests] = TypeAdapter(mcp_types.InputRequests)


class TaskHandle(mcp_types.Result):
    """``CreateTaskResult``: the task a server answered a ``tools/call`` with.

    Lenient like the 2025-11-25 lane's task (only what following it needs is required), so a
    server that omits timestamps or its TTL is still followed to the end rather than lost."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId", min_length=1, max_length=512)
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: float | None = Field(default=None, alias="pollIntervalMs")


class _DetailedTask(BaseModel):
    """A ``tasks/get`` answer: the task, with its result, error or input requests inline."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    task_id: str = Field(alias="taskId", min_length=1, max_length=512)
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: float | None = Field(default=None, alias="pollIntervalMs")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, alias="inputRequests")


class _TaskParams(mcp_types.RequestParams):
    task_id: str
    input_responses: mcp_types.InputResponses | None = None


class _TaskRequest(mcp_types.Request[_TaskParams, str]):
    """``tasks/get``, ``tasks/update`` and ``tasks/cancel``: over HTTP their ``Mcp-Name`` header
    names the task, so that a load balancer can route them to the instance that holds it."""

    name_param = "taskId"


class _Answer(mcp_types.Result):
    """Any result: a ``tasks/get`` answer is read as :class:`_DetailedTask` after this."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


async def _not_here(handle: TaskHandle, context: ClaimContext) -> mcp_types.CallToolResult:
    # codemode calls through ``session.call_tool(..., allow_claimed=True)`` and follows the task
    # itself (:class:`ExtTaskCalls`); the SDK's own resolution would bypass the call's gates.
    raise RuntimeError(f"task {handle.task_id} must be followed by codemode's host, not the SDK client")


class TasksExtension(ClientExtension):
    """Declares the extension, and lets the SDK parse a task handle as a ``tools/call`` answer."""

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=TaskHandle, resolve=_not_here),)


def may_task(session: ClientSession) -> bool:
    """Whether this 2026-07-28 server declared the extension: any call may then become a task,
    and take as long as a task may."""
    caps = session.server_capabilities
    return session.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(
        caps is not None and caps.extensions and TASKS_EXTENSION in caps.extensions
    )


class ExtTaskCalls:
    """One connection's 2026-07-28 tasks: follows the calls its server made tasks of."""

    def __init__(self, server: str, call_timeout: float, *, on_lost: Callable[[BaseException], None]) -> None:
        self.server = server
        self._call_timeout = call_timeout
        self._on_lost = on_lost

    async def follow(
        self,
        session: ClientSession,
        handle: TaskHandle,
        tool: str,
        answer: Answer,
        time_limit_s: float | None,
        sent_at: float,
        watch: CallWatch | None,
    ) -> mcp_types.CallToolResult:
        """Follow the task ``handle`` names to its end, within ``time_limit_s`` (default
        ``call_timeout``) of the call's sending at ``sent_at``, asking ``answer`` for the input
        it needs; each request on the way is bounded by ``call_timeout``. Every failure from
        here on is an :class:`OutcomeUnknownError` naming the task (see the module's table)."""
        timeout_s = time_limit_s if time_limit_s is not None else self._call_timeout
        run = _Run(session, self.server, tool, answer, self._call_timeout, watch)
        if watch is not None:
            watch.task_id = handle.task_id
        first = _DetailedTask.model_validate(handle.model_dump(by_alias=True))
        return await guard_task(
            self.server,
            tool,
            handle.task_id,
            follow=partial(run.follow, first),
            cancel=partial(run.cancel, handle.task_id),
            timeout_s=timeout_s,
            deadline=sent_at + timeout_s,
            on_lost=self._on_lost,
        )


class _Run:
    def __init__(
        self,
        session: ClientSession,
        server: str,
        tool: str,
        answer: Answer,
        request_timeout_s: float,
        watch: CallWatch | None,
    ) -> None:
        self.session = session
        self.server = server
        self.tool = tool
        self.answer = answer
        self.request_timeout_s = request_timeout_s
        self.watch = watch
        self.answered: set[str] = set()
        """Input request keys already answered: a server lists a request until it has used the
        answer, and the person must not be asked twice."""
        self.updates = 0
        """``tasks/update`` rounds sent (bounded like a call's own rounds of input)."""

    def _unknown(self, task_id: str, why: str) -> OutcomeUnknownError:
        return task_unknown(self.server, self.tool, task_id, why)

    async def _request(
        self,
        method: str,
        task_id: str,
        responses: mcp_types.InputResponses | None = None,
        timeout_s: float = 0,
    ) -> dict[str, Any]:
        request = _TaskRequest(method=method, params=_TaskParams(task_id=task_id, input_responses=responses))
        answer = await self.session.send_request(
            request, _Answer, request_read_timeout_seconds=timeout_s or self.request_timeout_s
        )
        return answer.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def follow(self, task: _DetailedTask) -> mcp_types.CallToolResult:
        last: str | None = None
        while True:
            if task.status != last and self.watch is not None:
                await self.watch.emit(status=task.status, message=task.status_message)
            last = task.status
            if task.status == "completed":
                return await self._completed(task)
            if task.status == "failed":
                return self._failed(task)
            if task.status == "cancelled":
                why = task.status_message or "no reason given"
                raise self._unknown(task.task_id, f"cancelled by the server ({why}); it may have partly run")
            if task.status == "input_required":
                await self._give_input(task)
            elif task.status != "working":
                raise self._unknown(task.task_id, f"unknown task status {task.status[:40]!r}")
            await anyio.sleep(poll_pause_s(task.poll_interval_ms))
            task = _DetailedTask.model_validate(await self._request("tasks/get", task.task_id))

    async def _completed(self, task: _DetailedTask) -> mcp_types.CallToolResult:
        if task.result is None:
            raise self._unknown(task.task_id, "completed without a result")
        result = mcp_types.CallToolResult.model_validate(task.result, by_name=False)
        if not result.is_error:
            await self.session.validate_tool_result(self.tool, result)
        return with_receipt(result, task.task_id, "failed" if result.is_error else "completed")

    def _failed(self, task: _DetailedTask) -> mcp_types.CallToolResult:
        error = task.error or {}
        said = task.status_message or str(error.get("message") or "no reason given")
        text = f"the task failed: {said}" + (f" (error {error['code']})" if "code" in error else "")
        result = mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=text)], is_error=True
        )
        return with_receipt(result, task.task_id, "failed")

    async def _give_input(self, task: _DetailedTask) -> None:
        """Answer the task's new input requests, in order (a person answers one at a time), and
        send the answers with ``tasks/update``."""
        pending = {
            k: r
            for k, r in _INPUT_REQUESTS.validate_python(task.input_requests or {}).items()
            if k not in self.answered
        }
        if not pending:
            return  # answered already; the server has yet to take the answers in
        self.updates += 1
        if self.updates > MAX_INPUT_ROUNDS:
            note = await self.cancel(task.task_id)
            why = f"still asked for input after {MAX_INPUT_ROUNDS} rounds; {note}"
            raise self._unknown(task.task_id, why)
        responses: mcp_types.InputResponses = {}
        for key, request in pending.items():
            response = await self.answer(request)
            if isinstance(response, mcp_types.ErrorData):
                if not isinstance(request, mcp_types.ElicitRequest):
                    note = await self.cancel(task.task_id)
                    why = f"asked for {request.method}, which was refused ({response.message}); {note}"
                    raise self._unknown(task.task_id, why)
                response = mcp_types.ElicitResult(action="decline")  # nobody to ask: a plain no
            responses[key] = response
        self.answered.update(responses)
        await self._request("tasks/update", task.task_id, responses)

    async def cancel(self, task_id: str) -> str:
        return await send_cancel(partial(self._request, "tasks/cancel", task_id, None, CANCEL_BOUND_S))
