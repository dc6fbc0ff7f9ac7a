"""One MCP client for one configured server, kept alive in its own task.

Each connection lives in a dedicated task because the SDK's client is an async context manager
whose internal task groups must be entered and exited by the same task. Other tasks call into
the live client; the connection task only waits for ``stop()`` and for list-changed events.

Failures stay local: a server that cannot be started, times out or crashes marks *this*
connection failed (with the command or URL, the reason and the tail of its stderr) and never
raises into the host's task group.
"""

from __future__ import annotations

import itertools
import math
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from functools import partial
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import mcp_types
from anyio.abc import TaskStatus
from mcp import Client
from mcp.client import Transport
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from codemode.calls import PLAIN_CALL, SendOptions
from codemode.catalog import ServerCatalog, ToolSpec
from codemode.config import HttpServerConfig, StdioServerConfig
from codemode.errors import (
    CodemodeError,
    OutcomeUnknownError,
    ServerConnectionError,
    ServerRejectedError,
    ServerUnavailableError,
)
from codemode.host._call_slots import CallSlots
from codemode.host._command import find_executable, resolve_setting
from codemode.host._errors import call_failure, describe_exception, root_cause
from codemode.host._frames import CutResults
from codemode.host._http import CALL_MARKER, Refusals, http_client_for
from codemode.host._inputs import InputRoundsExceeded, InputRouter, drive_input_rounds
from codemode.host._listen import listen_for_changes, listens_for_changes
from codemode.host._listing import fresh_for_s, list_catalog
from codemode.host._output_check import OutputCheck, install_output_check
from codemode.host._status import ConnectionState, ServerStatus
from codemode.host._stderr import StderrTail
from codemode.host._stdio import stdio_transport
from codemode.host._tasks import TaskCalls, unclaimed
from codemode.host._tasks_ext import ExtTaskCalls, TaskHandle, TasksExtension, may_task
from codemode.host._transport_end import TransportEnd

if TYPE_CHECKING:
    from codemode.auth import HostAuth

SDK_VERSION = package_version("mcp")

RECONNECT_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Backoff between reconnection attempts of a failed server."""

_T = TypeVar("_T")

CatalogListener = Callable[[ServerCatalog], Awaitable[None]]

TransportFactory = Callable[[], Transport | MCPServer]
"""Makes a fresh transport per connection attempt; replaces the one the server's config names.

A seam for tests (``codemode.testing``): an ``MCPServer`` here is served in this process."""


class ServerConnection:
    def __init__(
        self,
        name: str,
        config: StdioServerConfig | HttpServerConfig,
        *,
        environ: Mapping[str, str] | None = None,
        on_catalog: CatalogListener | None = None,
        transport: TransportFactory | None = None,
        auth: HostAuth | None = None,
    ) -> None:
        self.name = name
        self._auth = auth
        self.config = config
        self._transport = transport
        self._environ = os.environ if environ is None else environ
        self._on_catalog = on_catalog
        self._client: Client | None = None
        self._stderr: StderrTail | None = None
        self._failed_tail = ""
        """The server's stderr as the last failure left it: a reconnect starts a fresh tail, and
        the reason for the failure must not lose its telling line while the next attempt runs."""
        self._catalog: ServerCatalog | None = None
        self._tools_by_name: tuple[ServerCatalog | None, dict[str, ToolSpec]] = (None, {})
        self._state = ConnectionState.CONNECTING
        self._error: str | None = None
        self._protocol_version: str | None = None
        self._server_info: dict[str, Any] | None = None
        self._capabilities: dict[str, Any] | None = None
        self._stop = anyio.Event()
        self._lost = anyio.Event()
        self.reconnects = 0
        """How many times this connection was re-established after a failure."""
        self.settled = anyio.Event()
        """Set once the first connection attempt has succeeded or failed."""
        self._refresh_send, self._refresh_receive = anyio.create_memory_object_stream[str](16)
        self._http_refusals = Refusals()
        self._cut_results: CutResults = {}
        # Each call's marker (its progress token too) is unique per connection and unguessable
        # across connections; a counter instead of a uuid4 per call spares a getrandom().
        self._marker_prefix = secrets.token_hex(8) + "-"
        self._markers = itertools.count()
        self.output_check: OutputCheck | None = None
        """The current session's output-schema check (see :mod:`codemode.host._output_check`)."""
        self.inputs = InputRouter(config, lambda: self._client)  # its update_roots tells this client
        self._tasks = TaskCalls(name, config.call_timeout, on_lost=self._lost_if_gone)
        self._ext_tasks = ExtTaskCalls(name, config.call_timeout, on_lost=self._lost_if_gone)
        self.slots = CallSlots(name, config.max_concurrent_calls, config.call_timeout)
        """``max_concurrent_calls``: held by every request, across reconnects and runs."""
        self._transport_end: TransportEnd | None = None
        """The current attempt's transport, watched; None where there is none to watch (in-process)."""
        # Announced list changes vs. the ones a completed re-listing has covered: between the
        # two, the catalog may describe tools the server no longer offers as listed.
        self._announced = 0
        self._relisted = 0
        self._stale_at: float | None = None
        self._relisted_event = anyio.Event()

    # -- observation -----------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def catalog(self) -> ServerCatalog | None:
        return self._catalog

    def tool(self, name: str) -> ToolSpec | None:
        """The tool ``name`` as the current catalog lists it (by name: a call's lookup must not
        scan a catalog of thousands of tools)."""
        catalog = self._catalog
        if catalog is None:
            return None
        indexed, by_name = self._tools_by_name
        if indexed is not catalog:
            by_name = {spec.name: spec for spec in catalog.tools}
            self._tools_by_name = (catalog, by_name)
        return by_name.get(name)

    @property
    def relisting(self) -> bool:
        """The server announced a change of its lists that no completed re-listing covers yet, or
        the listing outlived the ``ttlMs`` the server gave it (which announces a re-listing)."""
        if self._stale_at is not None and anyio.current_time() >= self._stale_at:
            self._stale_at = None
            self._request_refresh("ttl")
        return self._relisted < self._announced

    async def wait_relisted(self, limit_s: float) -> bool:
        """Wait (at most ``limit_s`` seconds) until announced changes are listed; True if they are."""
        with anyio.move_on_after(limit_s):
            while self.relisting and self._state is ConnectionState.READY:
                await self._relisted_event.wait()
        return not self.relisting

    @property
    def protocol_version(self) -> str | None:
        return self._protocol_version

    def status(self) -> ServerStatus:
        catalog = self._catalog
        return ServerStatus(
            name=self.name,
            transport=self.config.transport,
            target=self.config.describe(),
            state=self._state,
            protocol_version=self._protocol_version,
            era=None
            if self._protocol_version is None
            else ("stateless" if self._protocol_version in MODERN_PROTOCOL_VERSIONS else "handshake"),
            sdk_version=SDK_VERSION,
            server_info=self._server_info,
            capabilities=self._capabilities,
            tool_count=len(catalog.tools) if catalog else 0,
            excluded_count=len(catalog.excluded) if catalog else 0,
            error=self._error,
            stderr_tail=self._error_tail(),
            reconnects=self.reconnects,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def _fail(self, reason: str) -> None:
        self._state = ConnectionState.FAILED
        self._error = reason
        self._client = None
        self._failed_tail = self._stderr.tail() if self._stderr else ""

    def _error_tail(self) -> str:
        """The stderr that goes with the current error: as the failure left it."""
        if self._error is not None:
            return self._failed_tail
        return self._stderr.tail() if self._stderr else ""

    def _client_for(self, stack: AsyncExitStack) -> Client:
        cfg = self.config
        mode = "legacy" if cfg.protocol == "legacy" else "auto"
        common: dict[str, Any] = {
            "mode": mode,
            # The handshake and listings get connect_timeout: a slow start must not fail for a
            # short call_timeout, which each call, read and prompt carries itself.
            "read_timeout_seconds": cfg.connect_timeout,
            "message_handler": self._on_message,
            # The catalog must reflect the server now; list-changed drift detection depends on it.
            "cache": None,
            "extensions": [TasksExtension()],  # declared on 2026-07-28 only (see ._tasks_ext)
            **self.inputs.client_callbacks(),
        }
        end = self._transport_end = TransportEnd()
        if self._transport is not None:
            given = self._transport()
            if isinstance(given, MCPServer):
                self._transport_end = None
                return Client(given, **common)
            return Client(end.watch(given), **common)
        if isinstance(cfg, StdioServerConfig):
            env = {k: resolve_setting(self.name, f"env.{k}", v, self._environ) for k, v in cfg.env.items()}
            command = resolve_setting(self.name, "command", cfg.command, self._environ)
            executable = find_executable(command, env, cfg.cwd)
            if executable is None:
                raise ServerConnectionError(
                    self.name,
                    cfg.describe(),
                    f"command {command!r} was not found; is it installed and on PATH?",
                )
            args = [resolve_setting(self.name, "args", a, self._environ) for a in cfg.args]
            self._stderr = StderrTail()
            stack.callback(self._stderr.close)
            transport = stdio_transport(
                [executable, *args],
                env=env or None,
                cwd=cfg.cwd,
                errlog=self._stderr.writer,
                max_message_bytes=cfg.max_message_bytes,
                cut_results=self._cut_results,
            )
            return Client(end.watch(transport), **common)
        url, http_client = http_client_for(self.name, cfg, self._environ, self._cut_results, self._auth)
        http_client.event_hooks["response"].append(self._http_refusals.on_response)
        stack.push_async_callback(http_client.aclose)
        return Client(end.watch(streamable_http_client(url, http_client=http_client)), **common)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, list the catalog, then stay connected until :meth:`stop`. Never raises.

        A server that fails - at start, or later (crash, lost stream) - is reconnected with
        backoff while the connection lives (``reconnect = true``, the default). Its tools come
        back only as the pins allow: the catalog is listed afresh and checked like any other.
        """
        task_status.started()
        failures = 0
        while True:
            was_ready = False
            try:
                was_ready = await self._attempt()
            except BaseException as exc:
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    self._state = ConnectionState.CLOSED
                    self._client = None
                    self.settled.set()
                    raise
                self._fail(describe_exception(exc, self.config))
            finally:
                self._client = None
                if self._error is not None and self._stderr is not None:
                    # The attempt's stderr is drained now (its pipe closed with the attempt).
                    self._failed_tail = self._stderr.tail()
                self.settled.set()
            if self._stop.is_set() or not self.config.reconnect:
                break
            failures = 0 if was_ready else failures + 1
            delay = RECONNECT_DELAYS_S[min(failures, len(RECONNECT_DELAYS_S) - 1)]
            with anyio.move_on_after(delay):
                await self._stop.wait()
            if self._stop.is_set():
                break
            self._state = ConnectionState.CONNECTING
            self.reconnects += 1
        if self._state is not ConnectionState.FAILED:
            self._state = ConnectionState.CLOSED

    async def _attempt(self) -> bool:
        """:meth:`_serve`, given up at :meth:`stop` even while it starts: closing must not wait
        out the connect_timeout of a server that is still starting (or hangs at start)."""
        ready = False
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._give_up_starting_at_stop, tg.cancel_scope)
            ready = await self._serve()
            tg.cancel_scope.cancel()
        return ready

    async def _give_up_starting_at_stop(self, scope: anyio.CancelScope) -> None:
        await self._stop.wait()
        if self._state is not ConnectionState.READY:  # a ready one closes itself, gracefully
            scope.cancel()

    async def _serve(self) -> bool:
        """One connection attempt; True if it got as far as ready (then ended: stop or lost)."""
        cfg = self.config
        connected = False
        self._lost = anyio.Event()
        # The deadline bounds starting + negotiating + the first listing; it is lifted once
        # connected. The client is entered and exited inside this one cancel scope so the SDK's
        # task groups stay properly nested.
        with anyio.CancelScope(deadline=anyio.current_time() + cfg.connect_timeout) as scope:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._client_for(stack))
                version = client.protocol_version
                if cfg.protocol == "2026-07-28" and version not in MODERN_PROTOCOL_VERSIONS:
                    raise ServerConnectionError(
                        self.name,
                        cfg.describe(),
                        f'protocol = "2026-07-28" is configured but the server negotiated {version}',
                    )
                self.output_check = install_output_check(client.session)
                self._client = client
                self._protocol_version = version
                info = client.server_info
                self._server_info = info.model_dump(mode="json", exclude_none=True) if info else None
                self._capabilities = client.server_capabilities.model_dump(
                    mode="json", by_alias=True, exclude_none=True
                )
                async with anyio.create_task_group() as tg:
                    # Subscribe before the first listing, so a change in between is never missed.
                    if listens_for_changes(client, self._protocol_version):
                        await tg.start(listen_for_changes, client, partial(self._request_refresh, "listen"))
                    await self._load_catalog(client)
                    scope.deadline = math.inf
                    connected = True
                    self._state = ConnectionState.READY
                    self._error = None
                    self.settled.set()
                    if self.reconnects and self._on_catalog is not None and self._catalog is not None:
                        await self._on_catalog(self._catalog)  # a reconnected server lists afresh
                    tg.start_soon(self._refresh_loop)
                    tg.start_soon(self._wait_lost, tg.cancel_scope)
                    await self._stop.wait()
                    tg.cancel_scope.cancel()
        if not connected:
            raise TimeoutError(f"no answer within connect_timeout = {cfg.connect_timeout:g} s")
        return True

    async def _wait_lost(self, scope: anyio.CancelScope) -> None:
        await self._lost.wait()
        scope.cancel()

    # -- catalog -----------------------------------------------------------------------------

    async def _load_catalog(self, client: Client) -> None:
        ttls: list[int] = []
        self._catalog = await list_catalog(self.name, client, learn=self._tasks.learn, ttls=ttls)
        fresh_for = fresh_for_s(ttls)
        self._stale_at = None if fresh_for is None else anyio.current_time() + fresh_for

    async def refresh_catalog(self) -> ServerCatalog:
        """List everything again (e.g. after ``notifications/tools/list_changed``)."""
        client = self._require_client()
        covers = self._announced
        await self._load_catalog(client)
        assert self._catalog is not None
        if self._on_catalog is not None:
            await self._on_catalog(self._catalog)
        self._relisted = max(self._relisted, covers)
        done, self._relisted_event = self._relisted_event, anyio.Event()
        done.set()
        return self._catalog

    async def _on_message(self, message: IncomingMessage) -> None:
        await self._tasks.on_message(message)
        list_changed = (
            mcp_types.ToolListChangedNotification
            | mcp_types.ResourceListChangedNotification
            | mcp_types.PromptListChangedNotification
        )
        if isinstance(message, list_changed):
            self._request_refresh("list_changed")

    def _refresh_send_has_room(self) -> bool:
        stats = self._refresh_send.statistics()
        return stats.current_buffer_used < stats.max_buffer_size

    async def _refresh_loop(self) -> None:
        async for _ in self._refresh_receive:
            # Coalesce a burst of notifications into one re-listing.
            while True:
                try:
                    self._refresh_receive.receive_nowait()
                except anyio.WouldBlock:
                    break
            try:
                await self.refresh_catalog()
            except Exception as exc:
                self._fail(describe_exception(exc, self.config))
                self._lost.set()
                return

    # -- requests ----------------------------------------------------------------------------

    def runs_as_task(self, tool: str) -> bool:
        """Whether a call of ``tool`` may be a long-running task (:mod:`._tasks`, :mod:`._tasks_ext`)."""
        client = self._client
        session = client.session if client is not None else None
        return session is not None and (self._tasks.wants_task(session, tool) or may_task(session))

    def _require_client(self) -> Client:
        client = self._client
        if client is None or self._state is not ConnectionState.READY:
            raise ServerUnavailableError(
                self.name,
                self.config.describe(),
                f"not connected ({self._state.value}{': ' + self._error if self._error else ''})",
                self._error_tail(),
            )
        return client

    async def call_tool(
        self, name: str, arguments: dict[str, Any], options: SendOptions = PLAIN_CALL
    ) -> mcp_types.CallToolResult:
        """Call a tool once, and say precisely what happened when it did not work.

        ``options.inputs`` answers the server's requests for input during this call (see
        :mod:`codemode.host._inputs`); without it such requests are refused. A tool that needs
        a task (:mod:`codemode.host._tasks`), or a call a 2026-07-28 server made a task
        (:mod:`codemode.host._tasks_ext`), is followed until done for at most
        ``options.time_limit_s`` seconds (default ``call_timeout``); ``options.on_progress`` hears
        what the call reports meanwhile.

        Raises:
            ServerUnavailableError: not connected; nothing was sent.
            ServerRefusedError: refused before execution (HTTP 429/503, or the server's schema for
                the tool changed - a refresh is scheduled so the pins see the drift); may be retried.
            ServerRejectedError: the server rejected the request as invalid; never retried.
            OutcomeUnknownError: sent, but no usable answer (timeout, lost connection, internal
                server error): it may have executed. Never retried automatically. A server's
                error answer fails this call only, whatever its code.
        """
        async with self.slots.hold(name):  # waits (unsent) while max_concurrent_calls are out
            return await self._send_call(name, arguments, options)

    async def _send_call(
        self, name: str, arguments: dict[str, Any], options: SendOptions
    ) -> mcp_types.CallToolResult:
        client = self._require_client()
        transport_end, sent_at = self._transport_end, anyio.current_time()
        marker = f"{self._marker_prefix}{next(self._markers):x}"
        watch = self._tasks.watch(marker, name, options.on_progress)
        token = {"progressToken": marker} if watch is not None else {}
        call_meta = cast(mcp_types.RequestParamsMeta, {**options.meta, **token, CALL_MARKER: marker})

        async def send(
            responses: mcp_types.InputResponses | None = None, state: str | None = None
        ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult | mcp_types.Result:
            # session.call_tool, not Client.call_tool: the latter silently re-lists and resends
            # when a 2026-07-28 server reports that the tool's schema changed; codemode must see
            # that change and stop, not adopt it.
            return await client.session.call_tool(
                name,
                arguments,
                read_timeout_seconds=self.config.call_timeout,
                meta=call_meta,
                allow_input_required=True,
                input_responses=responses,
                request_state=state,
                allow_claimed=True,  # a task handle (._tasks_ext), on 2026-07-28
            )

        self.inputs.track(marker, options.inputs)
        try:
            if self._tasks.wants_task(client.session, name):
                params = {"name": name, "arguments": arguments, "_meta": call_meta}
                limit = options.time_limit_s
                return await self._tasks.call(client.session, params, time_limit_s=limit, watch=watch)
            answers = partial(self.inputs.answer, options.inputs)
            answer = await send()
            if isinstance(answer, mcp_types.InputRequiredResult):
                answer = await drive_input_rounds(answer, answers, send)
            if isinstance(answer, TaskHandle):  # 2026-07-28: the server made the call a task
                follow = partial(self._ext_tasks.follow, client.session, answer, name, answers)
                return await follow(options.time_limit_s, sent_at, watch)
        except OutcomeUnknownError:
            raise  # a task's own verdict (it was created, then lost, unfinished or cancelled)
        except InputRoundsExceeded as exc:
            raise ServerRejectedError(self.name, name, 0, f"{exc}; the call did not complete") from exc
        except MCPError as exc:
            refusal = self._http_refusals.pop(marker)
            raise self._classify(name, exc, refusal, transport_end, sent_at) from exc
        except TimeoutError as exc:
            raise OutcomeUnknownError(self.name, name, self._no_answer()) from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            self._mark_lost(exc)
            raise OutcomeUnknownError(self.name, name, f"connection lost during the call: {exc!r}") from exc
        except Exception as exc:
            cut = self._cut_results.pop(marker, None)
            if cut is None:
                # Anything else after sending (an HTTP transport error wrapped in an exception
                # group, a malformed answer) leaves the outcome unknown: conservative, never retried.
                cause = root_cause(exc)
                raise OutcomeUnknownError(self.name, name, f"{type(cause).__name__}: {cause}") from exc
            # The transport cut an over-long answer; the SDK then refused it against the tool's
            # output schema. The call did complete: its cut result is the answer.
            answer = cut
        finally:
            self.inputs.forget(marker)
            self._tasks.forget(marker)
            self._http_refusals.pop(marker)
            self._cut_results.pop(marker, None)
        return unclaimed(cast(mcp_types.CallToolResult, answer))

    def _classify(
        self,
        tool: str,
        exc: MCPError,
        refusal: tuple[int, float | None] | None,
        transport_end: TransportEnd | None,
        sent_at: float,
    ) -> Exception:
        # -32000 and -32001 are the SDK's words for a closed connection and a timeout, and a
        # server's to use too (see ._transport_end): only the transport or the clock tells.
        closed = exc.code == mcp_types.CONNECTION_CLOSED and _ended(transport_end)
        timed_out = exc.code == mcp_types.REQUEST_TIMEOUT and (
            anyio.current_time() - sent_at >= self.config.call_timeout
        )
        if closed and transport_end is self._transport_end:  # not one a reconnect has replaced
            self._mark_lost(exc)  # (a failed sign-in ends the SDK's transport too: reconnect)
        if refusal is None and exc.code == mcp_types.HEADER_MISMATCH:
            self._request_refresh("header_mismatch")
        return call_failure(self.name, self.config, tool, exc, refusal, closed=closed, timed_out=timed_out)

    def _request_refresh(self, why: str) -> None:
        # Counted even when a re-listing is already queued: that one starts later and covers it.
        self._announced += 1
        if self._refresh_send_has_room():
            self._refresh_send.send_nowait(why)

    async def read_resource(self, uri: str) -> mcp_types.ReadResourceResult:
        async with self.slots.hold(uri):
            return await self._within_call_timeout(uri, self._require_client().read_resource(uri))

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> mcp_types.GetPromptResult:
        async with self.slots.hold(name):
            return await self._within_call_timeout(name, self._require_client().get_prompt(name, arguments))

    async def _within_call_timeout(self, what: str, request: Awaitable[_T]) -> _T:
        try:
            with anyio.fail_after(self.config.call_timeout):
                return await request
        except TimeoutError:
            # A read has no effect to be unsure of: plainly failed, not "outcome unknown".
            raise CodemodeError(f"{self.name}/{what}: {self._no_answer()}") from None

    def _no_answer(self) -> str:
        return f"no answer within call_timeout = {self.config.call_timeout:g} s"

    def _mark_lost(self, exc: BaseException) -> None:
        self._fail(f"connection lost: {exc}")
        self._lost.set()

    def _lost_if_gone(self, exc: BaseException) -> None:
        """A task's call failed as if the connection were lost: mark it so only if it is."""
        said_closed = isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED
        if not said_closed or _ended(self._transport_end):
            self._mark_lost(exc)


def _ended(transport_end: TransportEnd | None) -> bool:
    """Whether a -32000 means the transport ended rather than a server's answer. Without a watched
    transport (a server in this process) it is taken as the SDK's, as it always was."""
    return transport_end is None or transport_end.ended
