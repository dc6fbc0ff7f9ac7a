"""Long-running tool calls: MCP tasks (2025-11-25), and the progress a call reports while it runs.

A tool whose listing says ``execution.taskSupport = "required"``, on a server that declares
``tasks.requests.tools.call``, is called with a ``task`` in its ``tools/call``. The server
answers at once with a task handle; the host polls ``tasks/get`` (as often as the task's
``pollInterval`` asks, within bounds) until the task is terminal, then fetches the payload
with ``tasks/result``. To the program the stub call simply blocks until then.

What each ending becomes:

=====================================  ============================================================
ending                                 result
=====================================  ============================================================
``completed``                          the task's ``CallToolResult``
``failed``                             the tool's error result (``isError``)
``cancelled`` by the server            :class:`OutcomeUnknownError`: it may have partly executed
``input_required``                     ``tasks/result``, during which the server asks: the
                                       question goes to the run's person like any elicitation
                                       of the call (declined where nobody can answer), and the
                                       task's end is the result
the call's time runs out               ``tasks/cancel``, then :class:`OutcomeUnknownError`
the run is cancelled                   ``tasks/cancel`` (shielded, bounded), then the cancellation
lost (crash, connection, bad answer)   :class:`OutcomeUnknownError` naming the task; never retried
=====================================  ============================================================

The final result carries the task id in ``_meta["io.codemode/task"]``, and the broker records it
as the call's receipt. An unknown outcome names the task in its reason (which the ledger keeps),
so that it can be looked up on the server when the call is reconciled.

Progress: with a listener, the call's ``_meta.progressToken`` is the call's own marker, so
``notifications/progress`` for it (plain or task, and for the task's whole life) reach the
listener, as do the task's status changes seen by polling. ``notifications/tasks/status`` is
not heard: the SDK drops methods outside its tables, and polling sees the same changes.

``taskSupport = "optional"`` tools are called plainly: the server may then answer within the
call (bounded by ``call_timeout`` as any call), and the plain path keeps the exact error mapping
of :meth:`ServerConnection.call_tool`. A task costs two more round trips and a record the
server keeps for its TTL, worth it only when the tool cannot answer otherwise.

On 2026-07-28 tasks left the core protocol for the ``io.modelcontextprotocol/tasks`` extension
(SEP-2663: declared by the client, created at the server's discretion as ``resultType: "task"``,
results inline in ``tasks/get``, input through ``tasks/update``, no ``tasks/result``). The SDK
follows neither lane for codemode: this module speaks the 2025-11-25 one, and
:mod:`codemode.host._tasks_ext` the extension, with the helpers below (polling bounds, the
receipt, ``tasks/cancel``, and :func:`guard_task`, which ends a task the same way on both).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any

import anyio
import mcp_types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict, Field

from codemode.calls import CallProgress, ProgressListener
from codemode.errors import OutcomeUnknownError
from codemode.host._errors import root_cause

__all__ = [
    "TASK_META_KEY",
    "CallProgress",
    "CallWatch",
    "ProgressListener",
    "TaskCalls",
    "guard_task",
    "poll_pause_s",
    "send_cancel",
    "task_unknown",
    "unclaimed",
    "with_receipt",
]

log = logging.getLogger(__name__)

TASK_META_KEY = "io.codemode/task"
"""Result ``_meta`` key naming the task that produced the result: ``{"taskId", "status"}``."""

MIN_POLL_S = 0.01
MAX_POLL_S = 5.0
"""A ``pollInterval`` is honoured within these bounds: a server asking for 0 ms must not make
the host spin, and one asking for an hour is still asked every few seconds, so that a task
that ends early is noticed early."""
DEFAULT_POLL_S = 0.5
"""Between polls when the task suggests no interval."""
CANCEL_BOUND_S = 5.0
"""How long ``tasks/cancel`` may take when the call is being abandoned (it runs shielded)."""
TTL_MARGIN_MS = 60_000
"""The task is asked to outlive the call's deadline by this much, so its result can be fetched."""

_CONNECTION_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)


def unclaimed(result: mcp_types.CallToolResult) -> mcp_types.CallToolResult:
    """``result`` without a server's own ``io.codemode/task`` key: only the host may name the
    task a result came from, or a server could plant any receipt it likes in the ledger."""
    if not result.meta or TASK_META_KEY not in result.meta:
        return result
    meta = {k: v for k, v in result.meta.items() if k != TASK_META_KEY}
    return result.model_copy(update={"meta": meta or None})


def task_unknown(server: str, tool: str, task_id: str, why: str) -> OutcomeUnknownError:
    """The call's outcome is unknown, naming the task so it can be looked up on the server."""
    return OutcomeUnknownError(server, tool, f"task {task_id}: {why}")


def poll_pause_s(interval_ms: float | None) -> float:
    """Seconds to wait before the next ``tasks/get``: the task's own interval, within bounds."""
    interval = interval_ms / 1000 if interval_ms is not None else DEFAULT_POLL_S
    return min(max(interval, MIN_POLL_S), MAX_POLL_S)


def with_receipt(result: mcp_types.CallToolResult, task_id: str, status: str) -> mcp_types.CallToolResult:
    """``result`` naming the task it came from: the broker records the task id as the receipt."""
    meta = {**(result.meta or {}), TASK_META_KEY: {"taskId": task_id, "status": status}}
    return result.model_copy(update={"meta": meta})


async def send_cancel(request: Callable[[], Awaitable[object]]) -> str:
    """Send ``tasks/cancel`` (shielded: the call may be being abandoned, and bounded); what
    happened, for the error's reason."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_BOUND_S):
        try:
            await request()
        except Exception as exc:
            return f"tasks/cancel failed ({type(exc).__name__}), so it may still be running"
        return "tasks/cancel was sent and acknowledged"
    return "tasks/cancel got no answer, so it may still be running"


async def guard_task(
    server: str,
    tool: str,
    task_id: str,
    *,
    follow: Callable[[], Awaitable[mcp_types.CallToolResult]],
    cancel: Callable[[], Awaitable[str]],
    timeout_s: float,
    deadline: float,
    on_lost: Callable[[BaseException], None],
) -> mcp_types.CallToolResult:
    """``follow`` a created task to its end by ``deadline``; both lanes end a task this way.

    A limit, not a caller's cancel scope: when it runs out the task is cancelled on the server
    and the call ends as an unknown outcome naming the task, which a bare cancellation could
    not say. The run's cancellation cancels the task too, and propagates. Any other failure is
    an unknown outcome naming the task (a lost connection is reported to ``on_lost``)."""
    try:
        with anyio.move_on_after(deadline - anyio.current_time()):
            return await follow()
        why = f"not finished in the time allowed ({timeout_s:g} s); {await cancel()}"
        raise task_unknown(server, tool, task_id, why)
    except anyio.get_cancelled_exc_class():
        await cancel()  # the run was cancelled: so is its task
        raise
    except OutcomeUnknownError:
        raise
    except Exception as exc:
        if isinstance(exc, _CONNECTION_GONE) or (
            isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED
        ):
            on_lost(exc)
        cause = root_cause(exc)
        raise task_unknown(
            server, tool, task_id, f"lost ({type(cause).__name__}: {cause}); it may have executed"
        ) from exc


class CallWatch:
    """Passes one call's progress to its listener; a listener that fails never fails the call."""

    def __init__(self, server: str, tool: str, listener: ProgressListener) -> None:
        self.server = server
        self.tool = tool
        self.task_id: str | None = None
        self._listener = listener

    async def emit(
        self,
        *,
        status: str | None = None,
        progress: float | None = None,
        total: float | None = None,
        message: str | None = None,
    ) -> None:
        event = CallProgress(self.server, self.tool, self.task_id, status, progress, total, message)
        try:
            await self._listener(event)
        except Exception:
            log.exception("a progress listener of %s/%s raised", self.server, self.tool)


class _Task(BaseModel):
    """A task's state as ``tools/call``, ``tasks/get`` and ``tasks/cancel`` report it.

    Lenient on purpose (the SDK's ``Task`` requires ``ttl`` and timestamps): the host needs only
    the id, the status, its message and the poll interval, and a server that omits the rest is
    still followed to the end rather than lost."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    task_id: str = Field(alias="taskId", min_length=1, max_length=512)
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval: float | None = Field(default=None, alias="pollInterval")


class _TaskRequest(mcp_types.Request[mcp_types.GetTaskRequestParams, str]):
    """``tasks/get``, ``tasks/result`` and ``tasks/cancel`` share this params shape."""


class TaskCalls:
    """One connection's long-running calls: which tools need a task, and progress routing."""

    def __init__(self, server: str, call_timeout: float, *, on_lost: Callable[[BaseException], None]) -> None:
        self.server = server
        self._call_timeout = call_timeout
        self._on_lost = on_lost
        self._required: frozenset[str] = frozenset()
        self._watches: dict[str, CallWatch] = {}

    def learn(self, tools: Iterable[mcp_types.Tool]) -> None:
        """Remember, from a fresh listing, which tools must be called as tasks."""
        self._required = frozenset(
            t.name for t in tools if t.execution is not None and t.execution.task_support == "required"
        )

    def wants_task(self, session: ClientSession, tool: str) -> bool:
        """A task is asked for only where the server both requires and declares it (a server
        that does not declare ``tasks.requests.tools.call`` must not get one, whatever its tools
        say; its refusal of the plain call is then the answer)."""
        if tool not in self._required or session.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return False
        caps = session.server_capabilities
        tasks = caps.tasks if caps is not None else None
        return bool(tasks and tasks.requests and tasks.requests.tools and tasks.requests.tools.call)

    def watch(self, token: str, tool: str, listener: ProgressListener | None) -> CallWatch | None:
        if listener is None:
            return None
        watch = self._watches[token] = CallWatch(self.server, tool, listener)
        return watch

    def forget(self, token: str) -> None:
        self._watches.pop(token, None)

    async def on_message(self, message: object) -> None:
        """Route ``notifications/progress`` to the call whose token it names (the token is the
        call's marker, so it stays valid for the whole life of a task, as the spec asks)."""
        if isinstance(message, mcp_types.ProgressNotification):
            params = message.params
            watch = self._watches.get(str(params.progress_token))
            if watch is not None:
                await watch.emit(progress=params.progress, total=params.total, message=params.message)

    async def call(
        self,
        session: ClientSession,
        params: dict[str, Any],
        *,
        time_limit_s: float | None,
        watch: CallWatch | None,
    ) -> mcp_types.CallToolResult:
        """Call a tool as a task and follow it to its end, within ``time_limit_s`` in all
        (default ``call_timeout``; each request on the way is bounded by ``call_timeout`` too).

        A limit, not a caller's cancel scope: when it runs out the task is cancelled on the
        server and the call ends as an unknown outcome naming the task, which a bare
        cancellation could not say.

        ``params`` are the ``tools/call`` params (name, arguments, ``_meta``). Until the server
        has answered with a task, failures propagate as they are (the caller maps them as for
        any call); from then on every failure is an :class:`OutcomeUnknownError` naming the task.
        """
        tool = str(params["name"])
        run = _TaskRun(self.server, tool, session, self._call_timeout, watch, self._on_lost)
        return await run.run(params, time_limit_s if time_limit_s is not None else self._call_timeout)


class _TaskRun:
    def __init__(
        self,
        server: str,
        tool: str,
        session: ClientSession,
        request_timeout_s: float,
        watch: CallWatch | None,
        on_lost: Callable[[BaseException], None],
    ) -> None:
        self.server = server
        self.tool = tool
        self.session = session
        self.request_timeout_s = request_timeout_s
        self.watch = watch
        self.on_lost = on_lost
        caps = session.server_capabilities
        self.can_cancel = bool(caps is not None and caps.tasks is not None and caps.tasks.cancel is not None)

    def _unknown(self, task_id: str, why: str) -> OutcomeUnknownError:
        return task_unknown(self.server, self.tool, task_id, why)

    async def run(self, params: dict[str, Any], timeout_s: float) -> mcp_types.CallToolResult:
        deadline = anyio.current_time() + timeout_s
        ttl_ms = math.ceil(timeout_s * 1000) + TTL_MARGIN_MS
        raw = await self._create({**params, "task": {"ttl": ttl_ms}}, min(self.request_timeout_s, timeout_s))
        if "task" not in raw:
            # The server answered within the call after all: an ordinary result.
            result = unclaimed(mcp_types.CallToolResult.model_validate(raw, by_name=False))
            if not result.is_error:
                await self.session.validate_tool_result(self.tool, result)
            return result
        try:
            task = _Task.model_validate(raw["task"])
        except ValueError as exc:
            raise OutcomeUnknownError(self.server, self.tool, f"unreadable task handle: {exc}") from exc
        if self.watch is not None:
            self.watch.task_id = task.task_id
        return await guard_task(
            self.server,
            self.tool,
            task.task_id,
            follow=partial(self._follow, task, deadline),
            cancel=partial(self._cancel, task.task_id),
            timeout_s=timeout_s,
            deadline=deadline,
            on_lost=self.on_lost,
        )

    async def _create(self, params: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        # Sent through the session's dispatcher, not ``send_request``: the SDK validates a
        # ``tools/call`` answer against ``CallToolResult``, which a task handle is not (its task
        # types are declared but never dispatched). The one header its handshake-era stamp adds
        # is added here.
        version = self.session.protocol_version or "2025-11-25"
        dispatcher = self.session._dispatcher  # pyright: ignore[reportPrivateUsage]
        options: Any = {"headers": {MCP_PROTOCOL_VERSION_HEADER: version}, "timeout": timeout_s}
        return await dispatcher.send_raw_request("tools/call", params, options)

    async def _request(self, method: str, task_id: str, timeout_s: float | None = None) -> dict[str, Any]:
        request = _TaskRequest(method=method, params=mcp_types.GetTaskRequestParams(task_id=task_id))
        answer = await self.session.send_request(
            request, _Payload, request_read_timeout_seconds=timeout_s or self.request_timeout_s
        )
        return answer.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _follow(self, task: _Task, deadline: float) -> mcp_types.CallToolResult:
        last: str | None = None
        while True:
            if task.status != last and self.watch is not None:
                await self.watch.emit(status=task.status, message=task.status_message)
            last = task.status
            if task.status in ("completed", "failed"):
                return await self._result(task)
            if task.status == "cancelled":
                why = task.status_message or "no reason given"
                raise self._unknown(task.task_id, f"cancelled by the server ({why}); it may have partly run")
            if task.status == "input_required":
                # ``tasks/result`` lets the server ask (its request names the task); the question
                # goes to the run's person as any elicitation of the call, and the answer comes
                # back with the task's end. Where nobody can answer, the request is declined.
                return await self._result(task, deadline - anyio.current_time())
            if task.status != "working":
                raise self._unknown(task.task_id, f"unknown task status {task.status[:40]!r}")
            await anyio.sleep(poll_pause_s(task.poll_interval))
            task = _Task.model_validate(await self._request("tasks/get", task.task_id))

    async def _result(self, task: _Task, wait_s: float | None = None) -> mcp_types.CallToolResult:
        try:
            raw = await self._request("tasks/result", task.task_id, wait_s)
            result = mcp_types.CallToolResult.model_validate(raw, by_name=False)
        except MCPError as exc:
            if task.status != "failed" or exc.code == mcp_types.CONNECTION_CLOSED:
                raise
            # A failed task's payload may be the JSON-RPC error itself: the tool's error result.
            text = f"the task failed: {task.status_message or exc.error.message}"
            result = mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)])
        if task.status == "failed":
            result = result.model_copy(update={"is_error": True})
        elif not result.is_error:
            await self.session.validate_tool_result(self.tool, result)
        status = (
            task.status
            if task.status in ("completed", "failed")
            else ("failed" if result.is_error else "completed")
        )
        return with_receipt(result, task.task_id, status)

    async def _cancel(self, task_id: str) -> str:
        """Ask the server to cancel the task; what happened, for the error's reason."""
        if not self.can_cancel:
            return "the server offers no tasks/cancel, so it may still be running"
        return await send_cancel(partial(self._request, "tasks/cancel", task_id, CANCEL_BOUND_S))


class _Payload(mcp_types.Result):
    """Any result: ``tasks/*`` answers are read field by field after this keeps them whole."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
