"""Reading the run channel's frames off its socket (see ``_client``, whose channel is one reader).

A frame is a length header and a JSON body (``_wire``). Whichever thread holds the channel's read
role reads through the buffers here, which belong to the channel, not to the thread reading: a
reader that leaves mid-frame (an exception thrown into it) leaves what it read for the next one.
"""

from __future__ import annotations

import socket
from typing import Final

from . import _wire as wire

MIN_READ: Final = 64 * 1024
MAX_READ: Final = 1024 * 1024
"""Bounds of one ``recv``: small frames come in one read, a large one in pieces of at most this,
straight into a buffer of its own size (a 15 MB answer took half as long again through ``_buffer``)."""


class FrameReader:
    """The socket's read side, frame by frame, for whichever thread holds the read role."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.max_frame = wire.DEFAULT_MAX_FRAME_BYTES
        self._buffer = bytearray()
        self._large: bytearray | None = None
        self._large_filled = 0
        """A large frame's body being read, and how much has arrived: the channel's, as ``_buffer``."""

    def _mid_frame(self) -> bool:
        """Part of a frame has been read (``_buffer``, ``_large``): the socket is not at a frame's start."""
        return bool(self._buffer) or self._large is not None

    def _read_body(self) -> bytes | bytearray:
        """The next frame's body; EOFError at the end of the stream or for a frame over the limit."""
        if self._large is None:
            buffer = self._fill(wire.HEADER.size)
            (length,) = wire.HEADER.unpack_from(buffer)
            if length > self.max_frame:
                raise EOFError
            end = wire.HEADER.size + length
            if length <= MIN_READ or len(buffer) >= end:
                buffer = self._fill(end)
                body = bytes(memoryview(buffer)[wire.HEADER.size : end])
                del buffer[:end]
                return body
            large = bytearray(length)
            arrived = len(buffer) - wire.HEADER.size
            large[:arrived] = memoryview(buffer)[wire.HEADER.size :]
            # One statement: no signal handler runs inside it (as where the channel takes the role).
            self._large, self._large_filled, self._buffer = large, arrived, bytearray()
        return self._read_large()

    def _read_large(self) -> bytearray:
        """The rest of the large frame begun in ``_large``, received in place."""
        large = self._large
        assert large is not None
        with memoryview(large) as view:
            while self._large_filled < len(large):
                rest = view[self._large_filled :]
                got = self.sock.recv_into(rest, min(len(rest), MAX_READ))
                if not got:
                    raise EOFError
                self._large_filled += got
        self._large = None
        return large

    def _fill(self, size: int) -> bytearray:
        """The read buffer, once it holds at least ``size`` bytes (it may hold more: the start of
        the next frame, left there for whoever reads next)."""
        buffer = self._buffer
        while len(buffer) < size:
            chunk = self.sock.recv(min(max(size - len(buffer), MIN_READ), MAX_READ))
            if not chunk:
                raise EOFError
            buffer += chunk
        return buffer
