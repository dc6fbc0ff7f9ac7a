"""Whether a connection's transport has really ended, told apart from an answer that looks alike.

The SDK says "the connection closed" with the JSON-RPC error -32000 (and "no answer in time"
with -32001, which the connection tells from a server's by the clock). A server may answer one
request with either: JSON-RPC leaves -32000..-32099 to servers, and many use -32000 for any
failure of their own. Taken for a closed connection, one such answer tore the whole connection
down, and every other call on it then lost its answer.

The transport itself knows. The SDK reports a closed connection only once its session has
stopped reading - the server closed its output or exited, the transport failed (an HTTP request
that could not connect ends it), or the session is being shut down - or when a write found the
transport broken. :meth:`TransportEnd.watch` wraps a transport's streams so that each of these is
seen before the SDK's error reaches a caller: an error answer the session read while still
reading is an answer.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Protocol

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.client import Transport
from mcp.shared.message import SessionMessage

__all__ = ["TransportEnd"]

_ENDED = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)


class _Receiving(Protocol):
    async def receive(self) -> SessionMessage | Exception: ...
    async def aclose(self) -> None: ...


class _Sending(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...
    async def aclose(self) -> None: ...


class TransportEnd:
    """Set once one transport (one connection attempt) has ended; never unset."""

    def __init__(self) -> None:
        self.ended = False

    def mark(self) -> None:
        self.ended = True

    @asynccontextmanager
    async def watch(self, transport: Transport) -> AsyncGenerator[tuple[_WatchedRead, _WatchedWrite]]:
        """``transport`` with its streams watched for their end."""
        try:
            async with transport as (read_stream, write_stream):
                yield _WatchedRead(read_stream, self), _WatchedWrite(write_stream, self)
        finally:
            self.mark()


class _WatchedRead(ObjectReceiveStream[SessionMessage | Exception]):
    def __init__(self, inner: _Receiving, end: TransportEnd) -> None:
        self._inner = inner
        self._end = end

    @property
    def last_context(self) -> object:
        # The SDK's dispatcher reads the sender's context from streams that carry one.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except _ENDED:
            self._end.mark()
            raise

    async def aclose(self) -> None:
        # The session closes its read side before it tells waiting callers the connection closed,
        # on every path (end of stream, a failed transport cancelling it, shutdown).
        self._end.mark()
        await self._inner.aclose()


class _WatchedWrite(ObjectSendStream[SessionMessage]):
    def __init__(self, inner: _Sending, end: TransportEnd) -> None:
        self._inner = inner
        self._end = end

    async def send(self, item: SessionMessage) -> None:
        try:
            await self._inner.send(item)
        except _ENDED:
            self._end.mark()
            raise

    async def aclose(self) -> None:
        self._end.mark()
        await self._inner.aclose()
