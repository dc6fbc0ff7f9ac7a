"""The Streamable HTTP side of a connection: its HTTP client, and telling which call a 429/503 refused."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx2

__all__ = ["CALL_MARKER", "HTTP_READ_TIMEOUT_S", "call_marker", "new_http_client"]

CALL_MARKER = "io.codemode/call"
"""Key in a call's ``_meta`` that lets an HTTP 429/503 answer be tied to the call it refused."""
HTTP_READ_TIMEOUT_S = 300.0
"""How long an HTTP response stream may stay silent (a server may hold one open)."""
HTTP_TIMEOUT_S = 30.0
"""Connecting, writing and waiting for a pooled connection."""


def new_http_client(headers: dict[str, str] | None) -> httpx2.AsyncClient:
    """An HTTP client for one server. Redirects stay off: the transport follows same-origin ones."""
    return httpx2.AsyncClient(
        headers=headers or None, timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S)
    )


def call_marker(body: bytes) -> str | None:
    """The marker a refused request carried in ``params._meta`` (one JSON-RPC request per body)."""
    try:
        request: object = json.loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict):
        return None
    params = cast(dict[str, Any], request).get("params")
    meta = cast(dict[str, Any], params).get("_meta") if isinstance(params, dict) else None
    marker = cast(dict[str, Any], meta).get(CALL_MARKER) if isinstance(meta, dict) else None
    return marker if isinstance(marker, str) else None
