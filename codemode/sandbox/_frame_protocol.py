"""The host end of a channel connection as an :class:`asyncio.Protocol`: frames parsed as they arrive.

Why not an anyio stream: a stream read costs a task wake-up and, on asyncio, a pause/resume of the
transport (two ``epoll_ctl`` calls) per receive, which made the channel several times slower than
the socket under it. Here the event loop hands bytes straight to :meth:`FrameProtocol.data_received`,
which cuts them into frames, decodes each and passes the message to a synchronous ``sink``; replies
are whole frames written with :meth:`FrameProtocol.write`, so no lock is needed between writers.

The rules of :mod:`codemode.sandbox._framing` hold: a frame over the size limit
is refused from its header alone (its body is never buffered), bodies must be plain, shallow JSON
holding at most :data:`~codemode.sandbox._framing.MAX_VALUES` values (both checked before parsing),
and a big (but legal) body is decoded in a worker thread, in order, with reading paused meanwhile.
While the sink runs, :attr:`FrameProtocol.frame_size` tells it how big the message's frame was.
A violation ends the connection. :meth:`hold` / :meth:`release` let the owner stop the flow of
messages (for example at its in-flight limit): frames already buffered wait, and the socket stops
being read, so the peer is pushed back by the kernel's buffers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import anyio

from codemode.errors import ChannelError
from codemode.sandbox._framing import (
    HEADER,
    THREAD_DECODE_BYTES,
    ChannelClosed,
    FrameTooLarge,
    decode_counted,
)

__all__ = ["FrameProtocol", "first_message"]


Sink = Callable[[Any], None]
"""Receives each decoded message; raising :class:`ChannelError` from it ends the connection.

It runs in a protocol callback, outside any task, where anyio cannot tell which library runs on a
loop it did not start (a Ray actor's, a caller's ``asyncio.run``): a sink uses asyncio directly.
"""


class FrameProtocol(asyncio.Protocol):
    """Frames in, whole frames out. Set :attr:`sink` to start receiving messages."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.frame_size: tuple[int, int] = (0, 0)
        """The body bytes and (an upper bound of) the values of the message the sink is given."""
        self.sink: Sink | None = None
        self.error: ChannelError | None = None
        """Why the connection ended (a :class:`ChannelClosed` unless the peer broke the protocol)."""
        self.bytes_received = 0
        self.bytes_sent = 0
        """Bytes read from and written to the socket so far, frame headers included (a run's
        channel traffic is the difference across it)."""
        self.closed = anyio.Event()
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._holds = 0
        self._decoding = False
        self._eof = False
        self._reading_paused = False
        self._write_paused = False
        self._drained: asyncio.Event | None = None
        self._decode_task: asyncio.Task[None] | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, though not necessarily an asyncio.Transport subclass (uvloop's is not).
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.bytes_received += len(data)
        self._buffer += data
        self._pump()

    def eof_received(self) -> bool:
        self._eof = True
        self._pump()
        return True  # closed by _pump once the frames before the end are delivered

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None:
            detail = f"the connection broke: {exc}" if exc is not None else "the connection closed"
            self.error = ChannelClosed(detail)
        self._buffer.clear()
        self._write_paused = False
        if self._drained is not None:
            self._drained.set()
        self.closed.set()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None:
            self._drained.set()

    # -- the owner's side ---------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self.closed.is_set()

    def write(self, frame: bytes) -> None:
        """Queue one whole frame (raises :class:`ChannelClosed` once the connection has ended)."""
        transport = self._transport
        if transport is None or self.error is not None or transport.is_closing():
            raise ChannelClosed(str(self.error) if self.error else "the connection closed")
        self.bytes_sent += len(frame)
        transport.write(frame)

    async def drain(self) -> None:
        """Wait while the peer is not reading what was written (the transport's buffer is full)."""
        while self._write_paused and not self.is_closed:
            if self._drained is None or self._drained.is_set():
                self._drained = asyncio.Event()
            await self._drained.wait()

    def hold(self) -> None:
        """Stop delivering messages (nestable): buffered frames wait and the socket is not read."""
        self._holds += 1
        self._set_reading(False)

    def release(self) -> None:
        self._holds -= 1
        if self._holds <= 0:
            self._holds = 0
            self._pump()

    def close(self, error: ChannelError | None = None) -> None:
        """End the connection (``error`` records why, if nothing did before)."""
        if self.error is None and error is not None:
            self.error = error
        if self._transport is not None:
            self._transport.abort()  # nothing more is owed to the peer; buffered writes are dropped
        else:
            self.closed.set()

    # -- parsing ---------------------------------------------------------------------------------

    def _set_reading(self, on: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or on != self._reading_paused:
            return
        if on:
            transport.resume_reading()
        else:
            transport.pause_reading()
        self._reading_paused = not on

    def _pump(self) -> None:
        """Deliver every complete frame in the buffer, unless held, busy decoding or closed."""
        buffer = self._buffer
        try:
            while self.sink is not None and not self._holds and not self._decoding and self.error is None:
                if len(buffer) < HEADER.size:
                    break
                (length,) = HEADER.unpack_from(buffer)
                if length > self.max_frame_bytes:
                    raise FrameTooLarge(
                        f"frame of {length} bytes exceeds the limit of {self.max_frame_bytes}"
                    )
                end = HEADER.size + length
                if len(buffer) < end:
                    break
                body = bytes(buffer[HEADER.size : end])
                del buffer[:end]
                if length > THREAD_DECODE_BYTES:
                    self._decoding = True
                    self._set_reading(False)
                    # Kept referenced: the loop holds tasks only weakly.
                    self._decode_task = asyncio.get_running_loop().create_task(self._decode_off_loop(body))
                    return
                message, values = decode_counted(body)
                self.frame_size = (length, values)
                self.sink(message)
        except ChannelError as exc:
            self.close(exc)
            return
        if self.error is not None:
            return
        if len(buffer) >= HEADER.size:
            # Refuse an oversize frame from its header alone, even while the flow is held.
            (length,) = HEADER.unpack_from(buffer)
            if length > self.max_frame_bytes:
                self.close(
                    FrameTooLarge(f"frame of {length} bytes exceeds the limit of {self.max_frame_bytes}")
                )
                return
        if self._eof and not self._decoding:
            self.close(ChannelClosed("the connection closed"))
            return
        # Read on only while messages flow; otherwise let the kernel push the peer back.
        self._set_reading(self.sink is not None and not self._holds and not self._decoding)

    async def _decode_off_loop(self, body: bytes) -> None:
        try:
            message, values = await anyio.to_thread.run_sync(decode_counted, body)
        except ChannelError as exc:
            self._decoding = False
            self.close(exc)
            return
        except BaseException:
            self._decoding = False
            self.close(ChannelClosed("the channel stopped"))
            raise
        self._decoding = False
        if self.error is not None or self.sink is None:
            return
        try:
            self.frame_size = (len(body), values)
            self.sink(message)
        except ChannelError as exc:
            self.close(exc)
            return
        self._pump()


async def first_message(protocol: FrameProtocol) -> Any:
    """The connection's first message; the flow is then held until its owner releases it."""
    first: list[Any] = []
    arrived = anyio.Event()

    def sink(message: Any) -> None:
        first.append(message)
        protocol.hold()
        protocol.sink = None
        arrived.set()

    protocol.sink = sink
    protocol.release()
    async with anyio.create_task_group() as tg:

        async def watch_close() -> None:
            await protocol.closed.wait()
            arrived.set()

        tg.start_soon(watch_close)
        await arrived.wait()
        tg.cancel_scope.cancel()
    if not first:
        raise protocol.error or ChannelClosed("the connection closed")
    return first[0]
