"""Reading frames on the host: the channel's frames, with the host's own exceptions.

The frame format and the JSON rules are the wire contract's (:mod:`codemode.sandbox._wire`, the
same file the in-sandbox runtime reads). Everything read here comes from the sandbox and is
untrusted. A frame over the size limit is refused from its header alone (its body is never read;
the stream cannot be resynchronised, so the caller closes the connection).
"""

from __future__ import annotations

from typing import Any

import anyio
from anyio.abc import ByteReceiveStream
from anyio.streams.buffered import BufferedByteReceiveStream

from codemode.errors import ChannelError
from codemode.sandbox import _wire as wire

__all__ = [
    "HEADER",
    "MAX_DEPTH",
    "ChannelClosed",
    "FrameReader",
    "FrameTooLarge",
    "MalformedMessage",
    "decode",
    "encode",
    "json_depth",
]

HEADER = wire.HEADER
MAX_DEPTH = wire.MAX_DEPTH
encode = wire.encode_frame
json_depth = wire.json_depth
# Bodies larger than this are decoded in a worker thread so a big (but legal) frame does not stall
# every other sandbox's channel on the event loop.
_THREAD_DECODE_BYTES = 256 * 1024


class ChannelClosed(ChannelError):
    """The other side closed the connection (or it broke)."""


class FrameTooLarge(ChannelError):
    """A frame's header announced more bytes than the limit."""


class MalformedMessage(ChannelError):
    """A frame's body is not acceptable JSON (not UTF-8, not JSON, too deep, NaN …)."""


def decode(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one frame body, refusing anything but plain, shallow-enough JSON."""
    try:
        return wire.decode_body(body, max_depth=max_depth)
    except wire.WireError as exc:
        raise MalformedMessage(str(exc)) from None


class FrameReader:
    """Reads frames from a byte stream, enforcing ``max_frame_bytes`` before reading a body."""

    def __init__(self, stream: ByteReceiveStream, max_frame_bytes: int) -> None:
        self._stream = BufferedByteReceiveStream(stream)
        self.max_frame_bytes = max_frame_bytes

    async def _exactly(self, size: int) -> bytes:
        try:
            return await self._stream.receive_exactly(size)
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
        ):
            raise ChannelClosed("the connection closed") from None
        except OSError as exc:
            raise ChannelClosed(f"the connection broke: {exc}") from None

    async def read(self) -> Any:
        (length,) = HEADER.unpack(await self._exactly(HEADER.size))
        if length > self.max_frame_bytes:
            raise FrameTooLarge(f"frame of {length} bytes exceeds the limit of {self.max_frame_bytes}")
        body = await self._exactly(length)
        if length > _THREAD_DECODE_BYTES:
            return await anyio.to_thread.run_sync(decode, body)
        return decode(body)
