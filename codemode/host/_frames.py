"""Split a stdio server's output into messages, bounded, and decode each one on its own.

A stdio MCP server writes one JSON-RPC message per line. The SDK's reader keeps a whole line in
memory and decodes the stream as one text, so one hostile line can cost the host hundreds of
megabytes, and one byte that is not UTF-8 ends the connection. Here each line is a frame of its
own:

=============================  ==================================================================
what the server wrote          what the session receives
=============================  ==================================================================
a line of valid JSON-RPC       the message
a line over the size cap       only its first ``cap`` bytes are kept, the rest is read and dropped;
                               a ``tools/call`` answer becomes an ``ok`` result holding the text
                               that fits and a truncation marker, any other answer a JSON-RPC
                               error for that request only
a line that is not UTF-8, or   a JSON-RPC error for that request when its id can be read, else a
not JSON-RPC                   parse error the session logs; the next line is read as usual
=============================  ==================================================================

Nothing here does I/O: :class:`LineFramer` takes chunks and returns frames, :func:`decode_frame`
turns a frame into what the session gets.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, cast

import mcp_types as types
from mcp.shared.message import SessionMessage

__all__ = [
    "CALL_MARKER",
    "PARSE_ERROR",
    "TRUNCATED_META",
    "CutResults",
    "Line",
    "LineFramer",
    "Oversized",
    "decode_frame",
    "marker_in",
    "remember_cut",
]

PARSE_ERROR = -32700
"""JSON-RPC's code for a message that could not be parsed."""
TRUNCATED_META = "codemode/truncated"
"""Key in a truncated result's ``_meta``: the size the server sent and the cap that cut it."""
CALL_MARKER = "io.codemode/call"
"""Key in a call's ``_meta`` that ties what a transport sees (a 429, a cut answer) to the call."""

CutResults = dict[str, types.CallToolResult]
"""Cut tool results by call marker. The SDK checks a result against the tool's output schema,
which a cut result cannot match, so the transport also hands it to the connection this way."""

# A response's id is among its first fields in practice (the SDKs write jsonrpc, id, result); it
# is looked for in this much of a frame that cannot be parsed whole.
_ID_WINDOW = 1024
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,128}")')
_FIRST_TEXT = re.compile(rb'"text"\s*:\s*"')


@dataclass(frozen=True, slots=True)
class Line:
    """One whole line, without its newline."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the cap: its first ``cap`` bytes and its full length."""

    prefix: bytes
    size: int


class LineFramer:
    """Cut a byte stream into lines; never hold more than ``cap`` bytes of one line."""

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError("cap must be positive")
        self.cap = cap
        self._pending = bytearray()
        self._dropped = 0  # bytes of the current line read past the cap (0: under the cap)

    def feed(self, chunk: bytes) -> list[Line | Oversized]:
        frames: list[Line | Oversized] = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            self._take(piece)
            if end < 0:
                break
            frames.append(self._finish())
            start = end + 1
        return frames

    def flush(self) -> Line | Oversized | None:
        """The last line when the stream ends without a newline (None if nothing is pending)."""
        if not self._pending and not self._dropped:
            return None
        return self._finish()

    def _take(self, piece: bytes) -> None:
        room = self.cap - len(self._pending)
        if len(piece) <= room and not self._dropped:
            self._pending += piece
            return
        self._pending += piece[: max(room, 0)]
        self._dropped += len(piece) - max(room, 0)

    def _finish(self) -> Line | Oversized:
        data, dropped = bytes(self._pending), self._dropped
        self._pending.clear()
        self._dropped = 0
        if dropped:
            return Oversized(data, len(data) + dropped)
        return Line(data.rstrip(b"\r"))


def decode_frame(
    frame: Line | Oversized, methods: dict[types.RequestId, str]
) -> SessionMessage | Exception | None:
    """What the session receives for ``frame``; ``None`` for a blank line.

    ``methods`` maps the ids of requests in flight to their method, so that a cut answer to
    ``tools/call`` can still be a result.
    """
    if isinstance(frame, Oversized):
        return _oversized(frame, methods)
    if not frame.data.strip():
        return None
    try:
        text = frame.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _unreadable(frame.data, f"the server sent a message that is not UTF-8 ({exc.reason})")
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError as exc:
        return _unreadable(frame.data, f"the server sent a message that is not JSON-RPC: {_first_line(exc)}")


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _request_id(data: bytes) -> types.RequestId | None:
    match = _ID.search(data[:_ID_WINDOW])
    if match is None:
        return None
    try:
        value: object = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, int | str) else None


def _error(request_id: types.RequestId, code: int, message: str) -> SessionMessage:
    error = types.ErrorData(code=code, message=message)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _unreadable(data: bytes, reason: str) -> SessionMessage | Exception:
    request_id = _request_id(data)
    if request_id is None:
        return ValueError(f"{reason}; no request id found, so the message was dropped")
    return _error(request_id, PARSE_ERROR, reason)


def _oversized(frame: Oversized, methods: dict[types.RequestId, str]) -> SessionMessage | Exception:
    request_id = _request_id(frame.prefix)
    cap = len(frame.prefix)
    note = f"the server's message was {frame.size:,} bytes, over this server's cap of {cap:,}"
    if request_id is None:
        return ValueError(f"{note}; no request id found, so the message was dropped")
    if methods.get(request_id) != "tools/call" or b'"error"' in frame.prefix[:_ID_WINDOW]:
        return _error(request_id, PARSE_ERROR, f"{note} (max_message_bytes); it was dropped")
    kept = _leading_text(frame.prefix)
    marker = f"\n[truncated by codemode: {note}; raise max_message_bytes for this server to see more]"
    result: dict[str, Any] = {
        # resultType: the 2026-07-28 revision requires it; earlier ones take "complete" as given.
        "resultType": "complete",
        "content": [{"type": "text", "text": kept + marker}],
        "isError": False,
        "_meta": {TRUNCATED_META: {"size": frame.size, "cap": cap}},
    }
    response = types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)
    return SessionMessage(response)


def _leading_text(prefix: bytes) -> str:
    """The first text content's value, as far as ``prefix`` holds it."""
    match = _FIRST_TEXT.search(prefix)
    if match is None:
        return ""
    body = prefix[match.end() :]
    # Stop at the string's closing quote if it is in the prefix, else at the cut.
    escaped = False
    for index, byte in enumerate(body):
        if escaped:
            escaped = False
        elif byte == 0x5C:  # backslash
            escaped = True
        elif byte == 0x22:  # closing quote
            body = body[:index]
            break
    return _json_string_prefix(body)


def _json_string_prefix(body: bytes) -> str:
    """Decode the inside of a JSON string cut anywhere, dropping an escape or character cut in two."""
    text = body.decode("utf-8", errors="ignore")
    for trim in range(7):  # the longest escape, \uXXXX, is 6 characters
        candidate = text[: len(text) - trim] if trim else text
        try:
            value: object = json.loads(f'"{candidate}"')
        except ValueError:
            continue
        return value if isinstance(value, str) else ""
    return ""


def marker_in(params: object) -> str | None:
    """The call marker in a request's params (``params._meta``), if it carries one."""
    if not isinstance(params, dict):
        return None
    meta = cast(dict[str, Any], params).get("_meta")
    marker = cast(dict[str, Any], meta).get(CALL_MARKER) if isinstance(meta, dict) else None
    return marker if isinstance(marker, str) else None


def remember_cut(message: SessionMessage | Exception | None, marker: str | None, cut: CutResults) -> None:
    """Keep a cut ``tools/call`` result for its call (see :data:`CutResults`)."""
    if marker is None or not isinstance(message, SessionMessage):
        return
    response = message.message
    if isinstance(response, types.JSONRPCResponse) and TRUNCATED_META in response.result.get("_meta", {}):
        cut[marker] = types.CallToolResult.model_validate(response.result)
