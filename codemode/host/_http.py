"""The Streamable HTTP side of a connection: its HTTP client, and telling which call a 429/503 refused."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx2

from codemode.host._frames import CALL_MARKER, CutResults, marker_in
from codemode.host._http_cap import CappedTransport

__all__ = ["CALL_MARKER", "HTTP_READ_TIMEOUT_S", "call_marker", "new_http_client"]

HTTP_READ_TIMEOUT_S = 300.0
"""How long an HTTP response stream may stay silent (a server may hold one open)."""
HTTP_TIMEOUT_S = 30.0
"""Connecting, writing and waiting for a pooled connection."""


def new_http_client(
    headers: dict[str, str] | None, max_message_bytes: int, cut_results: CutResults
) -> httpx2.AsyncClient:
    """An HTTP client for one server, reading at most ``max_message_bytes`` of any one message.

    Redirects stay off: the SDK's transport follows same-origin ones itself."""
    return httpx2.AsyncClient(
        headers=headers or None,
        timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S),
        transport=CappedTransport(httpx2.AsyncHTTPTransport(), max_message_bytes, cut_results),
    )


def call_marker(body: bytes) -> str | None:
    """The marker a refused request carried in ``params._meta`` (one JSON-RPC request per body)."""
    try:
        request: object = json.loads(body)
    except ValueError:
        return None
    return marker_in(cast(dict[str, Any], request).get("params")) if isinstance(request, dict) else None
