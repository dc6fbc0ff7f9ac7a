"""Bounded reading of a Streamable HTTP server: the same per-message cap as stdio.

An HTTP answer is either one JSON body (``application/json``) or a stream of server-sent events
(``text/event-stream``) whose ``data:`` lines each hold one JSON-RPC message. Both are read
through :class:`CappedTransport`, which never holds more than ``cap`` bytes of one message: a
longer one is read to its end and dropped, and what the SDK receives in its place is what
:func:`codemode.host._frames.decode_frame` makes of the kept prefix (a ``tools/call`` result cut
with a marker, else an error for that request only).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx2
import mcp_types as types
from mcp.shared.message import SessionMessage

from codemode.host._frames import (
    CutResults,
    Line,
    LineFramer,
    Oversized,
    decode_frame,
    marker_in,
    remember_cut,
)

__all__ = ["CappedTransport"]

_CHUNK = 64 * 1024


class CappedTransport(httpx2.AsyncBaseTransport):
    """Wraps another transport; bounds each JSON-RPC message in the responses it returns."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, cap: int, cut_results: CutResults) -> None:
        self._inner = inner
        self.cap = cap
        self._cut = cut_results

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in ("application/json", "text/event-stream"):
            return response
        sent = _Sent(request, self._cut)
        source = cast(AsyncIterator[bytes], response.stream)
        if kind == "application/json":
            body = _capped_json(source, self.cap, sent)
        else:
            body = _capped_events(source, self.cap, sent)
        # The length changes when a message is replaced; the SDK reads to the end either way.
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-length"]
        return httpx2.Response(
            response.status_code,
            headers=headers,
            stream=_Stream(body, response.stream),
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Stream(httpx2.AsyncByteStream):
    def __init__(self, body: AsyncIterator[bytes], original: object) -> None:
        self._body = body
        self._original = original

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._body:
            yield chunk

    async def aclose(self) -> None:
        close = getattr(self._original, "aclose", None)
        if close is not None:
            await close()


class _Sent:
    """The request a response answers. Its body is read only when a message must be replaced:
    rarely, so the common path parses nothing twice."""

    def __init__(self, request: httpx2.Request, cut: CutResults) -> None:
        self._request = request
        self._cut = cut

    def _requests(self) -> tuple[dict[types.RequestId, str], dict[types.RequestId, str]]:
        """The methods and call markers of the JSON-RPC requests in the body, by id."""
        methods: dict[types.RequestId, str] = {}
        markers: dict[types.RequestId, str] = {}
        try:
            body: object = json.loads(self._request.content) if self._request.content else None
        except (ValueError, httpx2.RequestNotRead):
            return methods, markers
        for message in cast(list[object], body) if isinstance(body, list) else [body]:
            if not isinstance(message, dict):
                continue
            fields = cast(dict[str, Any], message)
            request_id, method = fields.get("id"), fields.get("method")
            if isinstance(request_id, int | str) and isinstance(method, str):
                methods[request_id] = method
                if (marker := marker_in(fields.get("params"))) is not None:
                    markers[request_id] = marker
        return methods, markers

    def replacement(self, frame: Oversized) -> bytes | None:
        methods, markers = self._requests()
        message = decode_frame(frame, methods)
        if not isinstance(message, SessionMessage):
            return None  # no id to answer: the message is dropped
        answer = message.message
        request_id = answer.id if isinstance(answer, types.JSONRPCResponse | types.JSONRPCError) else None
        remember_cut(message, markers.get(request_id) if request_id is not None else None, self._cut)
        return answer.model_dump_json(by_alias=True, exclude_unset=True).encode()


async def _capped_json(source: AsyncIterator[bytes], cap: int, sent: _Sent) -> AsyncIterator[bytes]:
    kept = bytearray()
    size = 0
    async for chunk in source:
        size += len(chunk)
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    if size <= cap:
        yield bytes(kept)
        return
    replacement = sent.replacement(Oversized(bytes(kept), size))
    if replacement is not None:
        yield replacement


_DATA = b"data:"


async def _capped_events(source: AsyncIterator[bytes], cap: int, sent: _Sent) -> AsyncIterator[bytes]:
    # The SDK's servers put each message on one ``data:`` line, so a line is the unit to bound.
    framer = LineFramer(cap + len(_DATA) + 1)
    async for chunk in source:
        for frame in framer.feed(chunk):
            out = _event_line(frame, sent)
            if out is not None:
                yield out
    last = framer.flush()
    if last is not None:
        out = _event_line(last, sent)
        if out is not None:
            yield out.rstrip(b"\n")


def _event_line(frame: Line | Oversized, sent: _Sent) -> bytes | None:
    if isinstance(frame, Line):
        return frame.data + b"\n"
    if not frame.prefix.startswith(_DATA):
        return None  # an over-long comment or field: not a message, dropped
    payload = frame.prefix[len(_DATA) :].removeprefix(b" ")
    dropped = len(frame.prefix) - len(payload)
    replacement = sent.replacement(Oversized(payload, frame.size - dropped))
    return None if replacement is None else b"data: " + replacement + b"\n"
