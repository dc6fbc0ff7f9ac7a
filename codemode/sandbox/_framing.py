"""The channel's frame rules on the host: limits, decoding, and the host's own exceptions.

The frame format and the JSON rules are the wire contract's (:mod:`codemode.sandbox._wire`, the
same file the in-sandbox runtime reads). Everything read here comes from the sandbox and is
untrusted. A frame over the size limit is refused from its header alone (its body is never read;
the stream cannot be resynchronised, so the caller closes the connection). A body nested too deeply
or holding too many values (:data:`MAX_VALUES`) is refused before it is parsed, so what a frame
decodes to is bounded too, not only its size.
"""

from __future__ import annotations

from typing import Any

from codemode.errors import ChannelError
from codemode.sandbox import _wire as wire

__all__ = [
    "HEADER",
    "MAX_DEPTH",
    "MAX_VALUES",
    "THREAD_DECODE_BYTES",
    "ChannelClosed",
    "FrameTooLarge",
    "MalformedMessage",
    "decode",
    "decode_counted",
    "encode",
    "json_depth",
]

HEADER = wire.HEADER
MAX_DEPTH = wire.MAX_DEPTH
MAX_VALUES = wire.MAX_VALUES
encode = wire.encode_frame
json_depth = wire.json_depth
# Bodies larger than this are decoded in a worker thread so a big (but legal) frame does not stall
# every other sandbox's channel on the event loop.
THREAD_DECODE_BYTES = 256 * 1024


class ChannelClosed(ChannelError):
    """The other side closed the connection (or it broke)."""


class FrameTooLarge(ChannelError):
    """A frame's header announced more bytes than the limit."""


class MalformedMessage(ChannelError):
    """A frame's body is not acceptable JSON (not UTF-8, not JSON, too deep, NaN …)."""


def decode(body: bytes) -> Any:
    """Parse one frame body, refusing anything but plain JSON, shallow and small enough."""
    return decode_counted(body)[0]


def decode_counted(body: bytes) -> tuple[Any, int]:
    """:func:`decode`, and an upper bound of the values in the body (see :func:`wire.scan_body`)."""
    try:
        values = wire.scan_body(body, max_depth=MAX_DEPTH, max_values=MAX_VALUES)
        return wire.parse_body(body), values
    except wire.WireError as exc:
        raise MalformedMessage(str(exc)) from None
