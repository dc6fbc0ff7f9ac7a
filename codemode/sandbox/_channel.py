"""The host end of one sandbox's channel: a Unix socket, JSON-RPC 2.0 in length-prefixed frames.

Lifecycle: :meth:`HostChannel.listen` creates the socket and a one-time secret file in the
sandbox's channel directory (the only host directory the sandbox can see); :meth:`accept` waits
for the first connection that says ``hello`` with that secret, then deletes both files so the
secret is worth nothing afterwards; :meth:`serve` answers the sandbox's requests until either
side closes.

Everything arriving here is untrusted. Requests are validated into the models of
:mod:`codemode.calls`; identity, tenant and approvals come from the :class:`RunBinding` the host
binds to the current run, never from the message; sequence numbers are assigned here. A request
outside a run is refused, and so is one over ``max_request_bytes`` (answers to the host, such as a
run's reply with its output, may use the whole frame limit). Requests in flight are bounded in
number (``max_inflight``), in body bytes (``max_inflight_bytes``) and in JSON values
(``max_inflight_values``): once any is reached the channel stops reading the socket until enough
finish, so a sandbox cannot make the host spawn unbounded work or hold unbounded memory. Any
protocol violation (bad frame, oversize, too deep, too many values, not JSON-RPC) closes the
connection.

The connection is served by :class:`codemode.sandbox._frame_protocol.FrameProtocol` (an
:class:`asyncio.Protocol`: frames are cut and decoded as bytes arrive, replies are written as whole
frames), which is why this module needs anyio's asyncio backend. Each request runs in an asyncio
task of its own, so slow handlers do not hold up the others; :meth:`serve` cancels and awaits
those still running when the connection ends.

Method names, message shapes, error codes and limits are the wire contract's
(:mod:`codemode.sandbox._wire`), the same file the in-sandbox runtime reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hmac
import logging
import os
import re
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from pydantic import BaseModel, ValidationError

from codemode.calls import (
    CallDenied,
    CallFailed,
    CallHandler,
    CallOutcome,
    ModuleProvider,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    SkillProposal,
    SkillProposer,
    ToolCallRequest,
)
from codemode.errors import ChannelError, SandboxError
from codemode.sandbox import _wire as wire
from codemode.sandbox._channel_messages import (
    CallParams,
    HelloParams,
    ImportParams,
    Message,
    PromptParams,
    ProposeParams,
    ReadParams,
    RpcError,
    classify,
    parse_params,
    response_frame,
)
from codemode.sandbox._frame_protocol import FrameProtocol, first_message
from codemode.sandbox._framing import ChannelClosed, encode
from codemode.sandbox._unix_listener import UnixListener

__all__ = ["PROTOCOL_VERSION", "HostChannel", "RunContext", "request_limit"]

log = logging.getLogger("codemode.sandbox.channel")

PROTOCOL_VERSION = wire.PROTOCOL_VERSION
SOCKET_NAME = wire.SOCKET_NAME
SECRET_NAME = wire.SECRET_NAME
HELLO_FRAME_BYTES = wire.HELLO_FRAME_BYTES
HELLO_TIMEOUT_S = 5.0
MAX_PENDING_HELLOS = 4
DEFAULT_MAX_INFLIGHT = 32
INFLIGHT_REQUESTS_OF_BYTES = 4
"""Request bodies held at once, by default: as many bytes as four of the largest requests."""

_MODULE_NAME = re.compile(r"(servers|skills)(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass
class RunContext:
    """What the host binds to the run currently executing in the sandbox."""

    binding: RunBinding
    modules: ModuleProvider
    handler: CallHandler
    calls: int = 0
    next_seq: int = 0

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.calls += 1
        return seq


@dataclass
class _Pending:
    event: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: BaseException | None = None


class RemoteError(ChannelError):
    """The sandbox answered a host request with a JSON-RPC error."""


def request_limit(max_frame_bytes: int) -> int:
    """The largest request a sandbox may send under a frame limit, unless set otherwise: a quarter
    of the limit, at least :data:`wire.DEFAULT_MAX_REQUEST_BYTES` (or the limit, when smaller)."""
    return min(max_frame_bytes, max(wire.DEFAULT_MAX_REQUEST_BYTES, max_frame_bytes // 4))


def _prepare_dir(path: Path, owner: tuple[int, int] | None) -> None:
    path.mkdir(mode=0o700 if owner else 0o711, exist_ok=False)
    if owner:
        os.chown(path, *owner)
    else:
        path.chmod(0o711)


class HostChannel:
    """One sandbox's channel. Create, :meth:`listen`, start the sandbox, :meth:`accept`, :meth:`serve`."""

    def __init__(
        self,
        directory: Path,
        *,
        max_frame_bytes: int,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        max_request_bytes: int | None = None,
        max_inflight_bytes: int | None = None,
        max_inflight_values: int = wire.MAX_VALUES,
        owner: tuple[int, int] | None = None,
    ) -> None:
        """``directory`` must not exist yet; ``owner`` is the (uid, gid) the sandbox runs as, when the
        host may chown (root): then only that uid can reach the socket. Otherwise the directory is
        traversable but not listable, and its random name is the capability.

        ``max_request_bytes`` applies to the sandbox's requests (by default
        :func:`request_limit`; never more than ``max_frame_bytes``, which bounds every frame);
        ``max_inflight_bytes`` defaults to :data:`INFLIGHT_REQUESTS_OF_BYTES` such requests. Each
        in-flight budget may be overrun by the one request that reaches it."""
        self.directory = directory
        self.max_frame_bytes = max_frame_bytes
        self.max_request_bytes = min(
            request_limit(max_frame_bytes) if max_request_bytes is None else max_request_bytes,
            max_frame_bytes,
        )
        self._owner = owner
        self._secret = secrets.token_urlsafe(32)
        self._listener: UnixListener | None = None
        self._protocol: FrameProtocol | None = None
        self._max_inflight = max(1, max_inflight)
        self._max_inflight_bytes = max(
            1,
            INFLIGHT_REQUESTS_OF_BYTES * self.max_request_bytes
            if max_inflight_bytes is None
            else max_inflight_bytes,
        )
        self._max_inflight_values = max(1, max_inflight_values)
        self._inflight = 0
        self._inflight_bytes = 0
        self._inflight_values = 0
        self._held = False
        """Whether this channel holds the flow because a budget above is used up."""
        self._served = False
        self._pending: dict[int, _Pending] = {}
        self._next_id = 1
        self._context: RunContext | None = None
        self._closed = anyio.Event()
        self._close_reason: str | None = None
        self._violation = False
        self._requests: set[asyncio.Task[None]] = set()
        """The sandbox's requests being answered, each in a task of its own."""
        self._request_context: contextvars.Context | None = None

    # -- setup -----------------------------------------------------------------------------

    @property
    def socket_path(self) -> Path:
        return self.directory / SOCKET_NAME

    async def listen(self) -> None:
        _prepare_dir(self.directory, self._owner)
        self._listener = UnixListener.bind(self.socket_path, mode=0o600 if self._owner else 0o666)
        secret_path = self.directory / SECRET_NAME
        fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400 if self._owner else 0o444)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(self._secret)
        if self._owner:
            os.chown(self.socket_path, *self._owner)
            os.chown(secret_path, *self._owner)

    def _remove_rendezvous(self) -> None:
        for name in (SOCKET_NAME, SECRET_NAME):
            with contextlib.suppress(FileNotFoundError):
                (self.directory / name).unlink()

    async def accept(
        self, within_s: float, *, gave_up: Callable[[], Awaitable[str | None]] | None = None
    ) -> None:
        """Wait for the sandbox to connect and authenticate.

        Connections that send anything but a correct ``hello`` first are closed and logged;
        at most a few are considered at once. ``gave_up`` is polled while waiting: when it returns a
        reason (for example the container already exited), waiting stops with that reason.
        """
        listener = self._listener
        if listener is None:
            raise SandboxError("HostChannel.listen() was not called")
        failure: str | None = None
        try:
            with anyio.move_on_after(within_s) as deadline:
                async with anyio.create_task_group() as tg:
                    if gave_up is not None:
                        tg.start_soon(self._poll_gave_up, gave_up, tg)
                    pending = 0

                    async def attempt(connection: socket.socket) -> None:
                        nonlocal pending
                        won = False
                        protocol = FrameProtocol(HELLO_FRAME_BYTES)
                        try:
                            loop = asyncio.get_running_loop()
                            await loop.connect_accepted_socket(lambda: protocol, connection)
                            with anyio.move_on_after(HELLO_TIMEOUT_S):
                                won = await self._authenticate(protocol)
                            if won and self._protocol is None:
                                self._protocol = protocol
                                protocol.max_frame_bytes = self.max_frame_bytes
                                tg.cancel_scope.cancel()
                            else:
                                won = False
                                log.warning(
                                    "sandbox channel %s: refused a connection (no valid hello)",
                                    self.directory,
                                )
                        except ChannelError as exc:
                            log.warning("sandbox channel %s: refused a connection: %s", self.directory, exc)
                            if self._close_reason is not None:  # the genuine runtime is incompatible
                                tg.cancel_scope.cancel()
                        finally:
                            pending -= 1
                            if not won:
                                protocol.close()
                                connection.close()

                    while True:
                        connection = await listener.accept_socket()
                        if pending >= MAX_PENDING_HELLOS:
                            connection.close()
                            continue
                        pending += 1
                        tg.start_soon(attempt, connection)
            if self._protocol is None:
                failure = self._close_reason or (
                    f"the sandbox did not connect within {within_s:g} s"
                    if deadline.cancelled_caught
                    else "gave up"
                )
        finally:
            await listener.aclose()
            self._listener = None
            self._remove_rendezvous()
        if failure is not None:
            raise SandboxError(failure)

    async def _poll_gave_up(self, gave_up: Callable[[], Awaitable[str | None]], tg: TaskGroup) -> None:
        while True:
            await anyio.sleep(0.1)
            reason = await gave_up()
            if reason is not None:
                self._close_reason = reason
                tg.cancel_scope.cancel()
                return

    async def _authenticate(self, protocol: FrameProtocol) -> bool:
        message = classify(await first_message(protocol))
        if message.kind != "request" or message.method != wire.HELLO:
            return False
        try:
            params = HelloParams.model_validate(message.params)
        except ValidationError:
            return False
        if not hmac.compare_digest(params.secret.encode(), self._secret.encode()):
            return False
        if params.protocol != PROTOCOL_VERSION:
            protocol.write(
                encode(wire.error_response(message.id, wire.INVALID_REQUEST, "unsupported protocol version"))
            )
            self._close_reason = (
                f"the sandbox runtime speaks channel protocol {params.protocol}, this host needs "
                f"{PROTOCOL_VERSION}: rebuild the image with `codemode sandbox build`"
            )
            raise ChannelError(self._close_reason)
        hello: wire.HelloResult = {"protocol": PROTOCOL_VERSION, "max_frame_bytes": self.max_frame_bytes}
        protocol.write(encode(wire.response(message.id, hello)))
        return True

    # -- running ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def close_reason(self) -> str | None:
        return self._close_reason

    @property
    def violated(self) -> bool:
        """True when the channel closed because the sandbox broke the protocol (not a plain EOF)."""
        return self._violation

    async def wait_closed(self) -> None:
        await self._closed.wait()

    @property
    def traffic(self) -> tuple[int, int]:
        """``(bytes sent to the sandbox, bytes received from it)`` since it connected."""
        protocol = self._protocol
        return (protocol.bytes_sent, protocol.bytes_received) if protocol is not None else (0, 0)

    def bind(self, context: RunContext) -> None:
        self._context = context

    def unbind(self) -> None:
        self._context = None

    async def serve(self) -> None:
        """Answer the sandbox until the connection ends. Never raises (failures close the channel)."""
        protocol = self._protocol
        try:
            if protocol is None:
                self._close_reason = "the sandbox never connected"
                return
            self._served = True
            # Requests run in copies of this task's context, not of whichever callback read them.
            self._request_context = contextvars.copy_context()
            try:
                protocol.sink = self._receive
                protocol.release()  # held since the hello: deliver what is buffered, read on
                await protocol.closed.wait()
            finally:
                protocol.sink = None
                await self._stop_requests()
            error = protocol.error
            if isinstance(error, ChannelClosed) or error is None:
                self._close_reason = self._close_reason or str(error or "the connection closed")
            else:
                self._violation = True
                self._close_reason = f"protocol violation: {error}"
                log.warning("sandbox channel %s closed: %s", self.directory, self._close_reason)
        except Exception as exc:  # a bug here must not take the manager's task group down
            log.exception("sandbox channel %s failed", self.directory)
            self._close_reason = f"channel failure: {exc}"
        finally:
            await self._shutdown()

    def _receive(self, raw: Any) -> None:
        """One message from the sandbox, on the event loop (raises ChannelError on a violation)."""
        message = classify(raw)
        if message.kind == "response":
            self._deliver(message)
            return
        protocol = self._protocol
        assert protocol is not None
        assert self._request_context is not None
        size, values = protocol.frame_size
        refusal: RpcError | None = None
        if size > self.max_request_bytes:
            refusal = RpcError(
                wire.INVALID_REQUEST,
                f"request of {size} bytes is over the limit of {self.max_request_bytes} bytes for a request",
            )
            message.params = None  # not held while the refusal is sent
            size = values = 0
        self._inflight += 1
        self._inflight_bytes += size
        self._inflight_values += values
        self._balance()  # at a limit, stop reading: the sandbox cannot make the host take on more
        # A plain asyncio task: an anyio task group's start_soon cost more per request than the
        # rest of the channel (0.19 -> 0.15 ms a round trip). serve() cancels and awaits them.
        task = asyncio.get_running_loop().create_task(
            self._dispatch(message, size, values, refusal), context=self._request_context.copy()
        )
        self._requests.add(task)
        task.add_done_callback(self._request_done)

    def _balance(self) -> None:
        """Hold the flow while a request budget is used up, release it once none is."""
        full = (
            self._inflight >= self._max_inflight
            or self._inflight_bytes >= self._max_inflight_bytes
            or self._inflight_values >= self._max_inflight_values
        )
        if full != self._held and self._protocol is not None:
            self._held = full
            if full:
                self._protocol.hold()
            else:
                self._protocol.release()

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._requests.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("sandbox channel %s: a request's task failed", self.directory, exc_info=error)

    async def _stop_requests(self) -> None:
        """Cancel the requests still being answered and wait until each has ended."""
        tasks = list(self._requests)
        for task in tasks:
            task.cancel()
        if tasks:
            with anyio.CancelScope(shield=True):
                await asyncio.wait(tasks)

    async def _shutdown(self) -> None:
        self._closed.set()
        for pending in self._pending.values():
            pending.error = ChannelClosed(self._close_reason or "the channel closed")
            pending.event.set()
        self._pending.clear()
        if self._protocol is not None:
            self._protocol.close()

    async def aclose(self) -> None:
        """Close the connection (the sandbox's runtime exits when it sees the end of its channel)."""
        if self._protocol is not None:
            self._protocol.close(ChannelClosed("the connection closed"))  # serve() ends with it
        if self._listener is not None:
            await self._listener.aclose()
            self._listener = None
        self._remove_rendezvous()
        if not self._served:
            # serve() never ran: nothing else will mark the channel closed.
            self._closed.set()
        await anyio.lowlevel.checkpoint()

    async def _send(self, message: dict[str, Any]) -> None:
        await self._send_frame(encode(message))

    async def _send_frame(self, frame: bytes) -> None:
        protocol = self._protocol
        if protocol is None:
            raise ChannelClosed("not connected")
        protocol.write(frame)  # a whole frame: writers never interleave
        await protocol.drain()

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request to the sandbox and wait for its answer.

        Raises :class:`ChannelClosed` when the channel ends first and :class:`RemoteError` when
        the sandbox answers with an error.
        """
        if self.closed:
            raise ChannelClosed(self._close_reason or "the channel is closed")
        request_id = self._next_id
        self._next_id += 1
        pending = _Pending()
        self._pending[request_id] = pending
        try:
            await self._send(wire.request(request_id, method, params))
            await pending.event.wait()
        finally:
            self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _deliver(self, message: Message) -> None:
        pending = self._pending.get(message.id) if isinstance(message.id, int) else None
        if pending is None:
            return  # an answer nobody waits for any more (for example after a timeout)
        if message.error is not None:
            error: dict[str, Any] = message.error if isinstance(message.error, dict) else {}  # pyright: ignore[reportUnknownVariableType]
            pending.error = RemoteError(str(error.get("message", "error"))[:1000])
        else:
            pending.result = message.result
        pending.event.set()

    async def _dispatch(self, message: Message, size: int, values: int, refusal: RpcError | None) -> None:
        try:
            reply = await self._reply(message, refusal)
            with contextlib.suppress(ChannelClosed):
                await self._send_frame(reply)
        finally:
            self._inflight -= 1
            self._inflight_bytes -= size
            self._inflight_values -= values
            self._balance()  # held at a limit: read on once below every one

    async def _reply(self, message: Message, refusal: RpcError | None) -> bytes:
        """The answer's frame; an error's when ``refusal`` is given or answering fails."""
        if refusal is None:
            try:
                return response_frame(message.id, await self._answer(message))
            except RpcError as exc:
                refusal = exc
            except Exception:
                log.exception("sandbox channel %s: handling %r failed", self.directory, message.method)
                refusal = RpcError(wire.INTERNAL_ERROR, "internal error")
        return encode(wire.error_response(message.id, refusal.code, refusal.message))

    async def _answer(self, message: Message) -> BaseModel | wire.ImportResult:
        method = message.method
        if method == wire.HELLO:
            raise RpcError(wire.INVALID_REQUEST, "already authenticated")
        if method not in wire.SANDBOX_METHODS:
            raise RpcError(wire.METHOD_NOT_FOUND, f"unknown method {method[:64]!r}")
        context = self._context
        if context is None:
            raise RpcError(wire.NO_RUN, "no program is running in this sandbox")
        if method == wire.IMPORT:
            return self._import(context, parse_params(ImportParams, message.params))
        outcome: CallOutcome
        if method == wire.CALL:
            call = parse_params(CallParams, message.params)
            # From the strictly validated fields' own dict: pydantic's core builds it several times
            # faster than model_construct or keyword arguments would (which iterate in Python).
            request = ToolCallRequest.model_validate({**vars(call), "seq": context.take_seq()})
            outcome = await _guard(context.handler.call_tool(context.binding, request), mutating=True)
        elif method == wire.PROPOSE_SKILL:
            proposed = parse_params(ProposeParams, message.params)
            handler = context.handler
            if not isinstance(handler, SkillProposer):
                return CallDenied(gate="skills", reason="this host does not take skill proposals")
            proposal = SkillProposal(**proposed.model_dump())
            outcome = await _guard(handler.propose_skill(context.binding, proposal), mutating=True)
        elif method == wire.READ_RESOURCE:
            read = parse_params(ReadParams, message.params)
            resource = ResourceReadRequest(seq=context.take_seq(), **read.model_dump())
            outcome = await _guard(context.handler.read_resource(context.binding, resource), mutating=False)
        else:
            prompt = parse_params(PromptParams, message.params)
            prompt_request = PromptGetRequest(seq=context.take_seq(), **prompt.model_dump())
            outcome = await _guard(
                context.handler.get_prompt(context.binding, prompt_request), mutating=False
            )
        return outcome

    def _import(self, context: RunContext, params: ImportParams) -> wire.ImportResult:
        name = params.module
        if not _MODULE_NAME.fullmatch(name):
            return {"found": False}
        source = context.modules.module_source(name)
        if source is None:
            return {"found": False}
        return {"found": True, "source": source.source, "is_package": source.is_package}


async def _guard(call: Awaitable[CallOutcome], *, mutating: bool) -> CallOutcome:
    """A handler that raises has a bug; the sandbox gets a failed outcome, the host keeps running."""
    try:
        return await call
    except Exception:
        log.exception("the call handler raised instead of returning an outcome")
        # A tool call may have reached the server before the handler failed.
        return CallFailed(reason="the host failed while handling the call", outcome_unknown=mutating)
