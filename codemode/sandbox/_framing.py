"""Length-prefixed JSON frames: 4-byte big-endian length, then that many bytes of UTF-8 JSON.

Everything read here comes from the sandbox and is untrusted. A frame over the size limit is
refused from its header alone (its body is never read; the stream cannot be resynchronised, so
the caller closes the connection). Nesting is bounded twice: the JSON decoder's own recursion
guard stops pathological depth (``RecursionError``), and an iterative walk after parsing enforces
the protocol's much smaller limit.
"""

from __future__ import annotations

import json
import struct
from typing import Any, NoReturn, cast

import anyio
from anyio.abc import ByteReceiveStream
from anyio.streams.buffered import BufferedByteReceiveStream

from codemode.errors import ChannelError

HEADER = struct.Struct(">I")
MAX_DEPTH = 64
# Bodies larger than this are decoded in a worker thread so a big (but legal) frame does not stall
# every other sandbox's channel on the event loop.
_THREAD_DECODE_BYTES = 256 * 1024


class ChannelClosed(ChannelError):
    """The other side closed the connection (or it broke)."""


class FrameTooLarge(ChannelError):
    """A frame's header announced more bytes than the limit."""


class MalformedMessage(ChannelError):
    """A frame's body is not acceptable JSON (not UTF-8, not JSON, too deep, NaN …)."""


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, ``[]`` is 1), computed without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: list[Any]
        if isinstance(item, dict):
            children = list(cast(dict[str, Any], item).values())
        elif isinstance(item, list):
            children = cast(list[Any], item)
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def decode(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one frame body, refusing anything but plain, shallow-enough JSON."""
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError:
        raise MalformedMessage("message nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedMessage(f"message is not valid JSON: {str(exc)[:200]}") from None
    if json_depth(value) > max_depth:
        raise MalformedMessage(f"message nested deeper than {max_depth} levels")
    return value


def encode(message: Any) -> bytes:
    """Serialise one message as a frame (header + body)."""
    body = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    return HEADER.pack(len(body)) + body


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
