"""codemode's stdio transport: a server process, its pipes, and bounded framing of what it writes.

It plays the part of the SDK's ``stdio_client`` (the same shutdown order: close stdin, wait,
SIGTERM the process group, wait, SIGKILL), with two differences. One matters for safety: the
server's output is framed by :mod:`codemode.host._frames`, so a line is never held past
``max_message_bytes`` and a line that does not decode fails one request instead of the
connection. The other is speed: requests are written by the task that sends them
(:class:`StdinWriter`), not handed to a writer task.

The server runs behind :mod:`codemode.host._launcher`, which holds this process's lifeline: a
host that is killed takes its servers with it. Each launcher is also on record
(:mod:`codemode.host._survivors`) until it has exited, and the first server a process starts
sweeps the records of dead hosts first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from subprocess import PIPE
from types import TracebackType
from typing import Self, TextIO

import anyio
import mcp_types as types
from anyio.abc import ByteSendStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from codemode.host._frames import CutResults, LineFramer, Oversized, decode_frame, marker_in, remember_cut
from codemode.host._launcher import CLOSE_GRACE_S, TERM_GRACE_S
from codemode.host._survivors import ServerRecords

__all__ = ["StdioStreams", "stdio_transport"]

StdioStreams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], "StdinWriter"]
"""What the session reads (messages, or errors it logs) and where it writes."""

_READ_CHUNK = 64 * 1024
LAUNCHER = Path(__file__).with_name("_launcher.py")


class _Host:
    """What a host process has once (made afresh in a forked child, whose servers must not
    outlive it either): its lifeline and the records of its servers."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        # A pipe whose write end only this process holds and never writes: it reads as ended once
        # the process is gone, however it died. Both ends close on exec, so no other child holds
        # them; each launcher is passed the read end.
        self.lifeline, self._write_end = os.pipe()
        self.records = ServerRecords()


_host: _Host | None = None


async def _this_host() -> _Host:
    """This process's lifeline and records; the first call sweeps the servers dead hosts left."""
    global _host
    host = _host
    if host is None or host.pid != os.getpid():
        host = _host = _Host()
        await anyio.to_thread.run_sync(host.records.reap)
    return host


@asynccontextmanager
async def stdio_transport(
    command: Sequence[str],
    *,
    env: dict[str, str] | None,
    cwd: str | Path | None,
    errlog: TextIO,
    max_message_bytes: int,
    cut_results: CutResults,
) -> AsyncGenerator[StdioStreams]:
    """Start ``command`` as a stdio MCP server in a new session; yield the session's streams."""
    host = await _this_host()
    process = await anyio.open_process(
        [sys.executable, "-I", str(LAUNCHER), "--lifeline", str(host.lifeline), "--", *command],
        stdin=PIPE,
        stdout=PIPE,
        stderr=errlog,
        env=get_default_environment() | (env or {}),
        cwd=cwd,
        start_new_session=True,
        pass_fds=(host.lifeline,),
    )
    with anyio.CancelScope(shield=True):  # a cancelled start still stops the process below
        await anyio.to_thread.run_sync(host.records.add, process.pid)
    reader_send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    in_flight: dict[types.RequestId, str] = {}
    markers: dict[types.RequestId, str] = {}
    assert process.stdin is not None
    write_stream = StdinWriter(process.stdin, in_flight, markers, on_broken=reader_send.aclose)

    async def read_stdout() -> None:
        assert process.stdout is not None
        framer = LineFramer(max_message_bytes)
        delivering = True
        async with reader_send:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                while True:
                    chunk = await process.stdout.receive(_READ_CHUNK)
                    for frame in framer.feed(chunk) if delivering else ():
                        message = decode_frame(frame, in_flight)
                        if message is None:
                            continue
                        if isinstance(frame, Oversized) and isinstance(message, SessionMessage):
                            remember_cut(message, _marker_for(message, markers), cut_results)
                        if isinstance(message, SessionMessage):
                            _settle(message, in_flight, markers)
                        try:
                            await reader_send.send(message)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            # The session is gone; keep reading (and dropping) so a server
                            # flushing its output is not blocked on a full pipe while it exits.
                            delivering = False
                            break

    async with anyio.create_task_group() as group:
        group.start_soon(read_stdout)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                read_stream.close()
                write_stream.close()
                await _stop(process)
                if process.returncode is not None:  # else it stays on record for a later sweep
                    await anyio.to_thread.run_sync(host.records.remove, process.pid)
            group.cancel_scope.cancel()


class StdinWriter:
    """The session's write side: each message is written to the server's stdin by the task that
    sends it.

    The SDK's stdio client hands each message to a writer task through a memory stream, which
    costs two event-loop turns before the request reaches the pipe; here it costs none. A message
    is one line written whole, so senders never interleave. Once the server stops reading, every
    send fails and the read side is ended, so that no request waits for an answer for ever.
    """

    def __init__(
        self,
        stdin: ByteSendStream,
        in_flight: dict[types.RequestId, str],
        markers: dict[types.RequestId, str],
        *,
        on_broken: Callable[[], Awaitable[None]],
    ) -> None:
        self._stdin = stdin
        self._in_flight = in_flight
        self._markers = markers
        self._on_broken = on_broken
        self._closed = False
        self._broken = False

    async def send(self, item: SessionMessage, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._broken:
            raise anyio.BrokenResourceError
        message = item.message
        if isinstance(message, types.JSONRPCRequest):
            self._in_flight[message.id] = message.method
            if (marker := marker_in(message.params)) is not None:
                self._markers[message.id] = marker
        line = message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8") + b"\n"
        try:
            await self._stdin.send(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            self._broken = True
            await self._on_broken()
            raise anyio.BrokenResourceError from None

    def close(self) -> None:
        self._closed = True

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()


def _answered(message: SessionMessage) -> types.RequestId | None:
    answer = message.message
    return answer.id if isinstance(answer, types.JSONRPCResponse | types.JSONRPCError) else None


def _marker_for(message: SessionMessage, markers: dict[types.RequestId, str]) -> str | None:
    request_id = _answered(message)
    return markers.get(request_id) if request_id is not None else None


def _settle(
    message: SessionMessage, in_flight: dict[types.RequestId, str], markers: dict[types.RequestId, str]
) -> None:
    request_id = _answered(message)
    if request_id is not None:
        in_flight.pop(request_id, None)
        markers.pop(request_id, None)


async def _stop(process: Process) -> None:
    """Close stdin, then SIGTERM and SIGKILL the server's process group, each after a grace."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    if not await _exited(process, CLOSE_GRACE_S):
        _signal_group(process, signal.SIGTERM)
        if not await _exited(process, TERM_GRACE_S):
            _signal_group(process, signal.SIGKILL)
            await _exited(process, TERM_GRACE_S)
    if process.stdout is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdout.aclose()
    with contextlib.suppress(OSError, RuntimeError), anyio.move_on_after(TERM_GRACE_S):
        await process.aclose()


async def _exited(process: Process, grace_s: float) -> bool:
    # Polled, not process.wait(): that also waits for the pipes' EOF, which a grandchild that
    # inherited them can hold open long after the server itself has gone.
    with anyio.move_on_after(grace_s):
        while process.returncode is None:  # noqa: ASYNC110 - no event tells us the exit
            await anyio.sleep(0.01)
    return process.returncode is not None


def _signal_group(process: Process, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
