"""The Streamable HTTP side of a connection: its HTTP client, and telling which call a 429/503 refused."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import httpx2

from codemode.config import HttpServerConfig, StdioServerConfig
from codemode.host._command import resolve_setting
from codemode.host._frames import CALL_MARKER, CutResults, marker_in
from codemode.host._http_cap import CappedTransport
from codemode.net import GuardedTransport, NetworkPolicy

if TYPE_CHECKING:
    from codemode.auth import HostAuth

__all__ = [
    "CALL_MARKER",
    "HTTP_READ_TIMEOUT_S",
    "Refusals",
    "call_marker",
    "http_client_for",
    "network_policy",
    "new_http_client",
    "refusal_reason",
]

HTTP_READ_TIMEOUT_S = 300.0
"""How long an HTTP response stream may stay silent (a server may hold one open)."""
HTTP_TIMEOUT_S = 30.0
"""Connecting, writing and waiting for a pooled connection."""


def new_http_client(
    headers: dict[str, str] | None,
    max_message_bytes: int,
    cut_results: CutResults,
    *,
    policy: NetworkPolicy,
    audience: str,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """An HTTP client for one server, reading at most ``max_message_bytes`` of any one message.

    Every request - MCP messages, OAuth discovery, token requests - leaves through the SSRF
    guard, pinned to the address the server's name first resolved to; a bearer token goes to
    ``audience`` (the server's origin) only. Redirects stay off: the SDK's transport follows
    same-origin ones itself, and the OAuth client its own, each hop through the guard."""
    guarded = GuardedTransport(policy, audience=audience)
    return httpx2.AsyncClient(
        headers=headers or None,
        timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S),
        transport=CappedTransport(guarded, max_message_bytes, cut_results),
        auth=auth,
    )


def network_policy(config: HttpServerConfig) -> NetworkPolicy:
    """What the SSRF guard lets ``config``'s server, and its sign-in, reach."""
    return NetworkPolicy(allow_loopback=config.allow_loopback, allow_private=config.allow_private_network)


def http_client_for(
    server: str,
    config: HttpServerConfig,
    environ: Mapping[str, str],
    cut_results: CutResults,
    auth: HostAuth | None,
) -> tuple[str, httpx2.AsyncClient]:
    """The resolved URL of ``server`` and the HTTP client that speaks to it."""
    headers = {k: resolve_setting(server, f"headers.{k}", v, environ) for k, v in config.headers.items()}
    url = resolve_setting(server, "url", config.url, environ)
    signer: httpx2.Auth | None = None
    if config.oauth is not None:
        if auth is None:
            from codemode.auth import HostAuth  # only hosts with an OAuth server load it

            auth = HostAuth()
        signer = auth.auth_for(server, config, url, environ)
    client = new_http_client(
        headers,
        config.max_message_bytes,
        cut_results,
        policy=network_policy(config),
        audience=url,
        auth=signer,
    )
    return url, client


def call_marker(body: bytes) -> str | None:
    """The marker a refused request carried in ``params._meta`` (one JSON-RPC request per body)."""
    try:
        request: object = json.loads(body)
    except ValueError:
        return None
    return marker_in(cast(dict[str, Any], request).get("params")) if isinstance(request, dict) else None


REFUSING_STATUSES = (401, 403, 429, 503)
"""HTTP answers that refuse a request before the server acts on it: no credentials or not enough
access (401/403 - the OAuth client may have tried to sign in again and could not), too many
requests (429) or unavailable (503)."""


class Refusals:
    """The HTTP refusals of calls in flight, by the marker each call carries in ``_meta``, so that
    a call that fails after one is known to have been refused, not lost."""

    def __init__(self) -> None:
        self._by_marker: dict[str, tuple[int, float | None]] = {}

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code not in REFUSING_STATUSES:
            return
        marker = call_marker(response.request.content)
        if marker is not None:
            retry_after = response.headers.get("retry-after", "").strip()
            # ASCII digits only: str.isdigit() also accepts "²", which float() refuses.
            delay = min(float(retry_after), 30.0) if retry_after.isascii() and retry_after.isdigit() else None
            self._by_marker[marker] = (response.status_code, delay)

    def pop(self, marker: str) -> tuple[int, float | None] | None:
        return self._by_marker.pop(marker, None)


def refusal_reason(server: str, config: StdioServerConfig | HttpServerConfig, status: int) -> str:
    """What a refused call tells the program, and through it the person: what to do next."""
    if status not in (401, 403):
        return f"HTTP {status}"
    if isinstance(config, HttpServerConfig) and config.oauth is not None:
        return f"HTTP {status}: the server wants a sign-in or more access; run `codemode auth login {server}`"
    return f"HTTP {status}: the server refused the credentials; check [servers.{server}] headers"
