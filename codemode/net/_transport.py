"""An httpx transport that connects only where the network policy allows, to pinned addresses.

Every request, redirect hops included (the client sends each hop through the transport), is
checked with :func:`check_url`; its host is resolved once per transport and its addresses are
pinned, so a name that later resolves elsewhere (DNS rebinding) keeps going to the addresses that
were judged. They are tried in order until one accepts the connection (``localhost`` is often
``::1`` first), and the one that did is tried first from then on. The request handed to the
inner transport names the pinned IP; the ``Host`` header and the TLS server name
(``sni_hostname``) keep the real host, so virtual hosting and certificate checks still see the
name. The response carries the original request, so the client builds redirect URLs and
``response.url`` from the name, not the IP.

Without an ``inner`` transport, each origin gets a connection pool of its own. A pool keys its
connections by the address it dialled, and two names may be pinned to one address: a shared pool
would send the second name over a TLS session that was only verified for the first.

Tokens are bound to one audience: a request to any other origin loses its ``Cookie`` and any
``Authorization`` that carries a token (``Bearer``, ``DPoP`` …), whatever redirect led there.
``Authorization: Basic`` passes: it is how an OAuth client authenticates itself to the token
endpoint of an authorization server, which is another origin by design.
"""

from __future__ import annotations

import logging
from ipaddress import IPv4Address, IPv6Address

import anyio
import httpx2

from codemode.net._policy import NetworkPolicy
from codemode.net._resolve import Resolver, SystemResolver, resolve_checked
from codemode.net._url import Target, check_url, parse_url

__all__ = ["GuardedTransport"]

log = logging.getLogger("codemode.net")

_CREDENTIAL_HEADERS = ("authorization", "cookie")

Addresses = tuple[IPv4Address | IPv6Address, ...]
"""A name's judged addresses, the one to try first at the front."""


def _pin_key(target: Target) -> tuple[str, str, int]:
    # The scheme is part of the key because it is part of the judgement (plain http must stay
    # on loopback).
    return (target.scheme, target.host, target.port)


def _client_authentication(name: str, value: str) -> bool:
    """An OAuth client's own credentials (RFC 6749 §2.3.1), meant for the authorization server."""
    return name == "authorization" and value.split(" ", 1)[0].lower() == "basic"


class GuardedTransport(httpx2.AsyncBaseTransport):
    """Wraps another transport (default :class:`httpx2.AsyncHTTPTransport`); refuses what the
    policy refuses with :class:`codemode.errors.UnsafeURLError`, before anything is sent.

    ``audience`` is the origin (or any URL of it) allowed to receive credentials. An ``inner``
    given here serves every origin: its pool may reuse one name's TLS connection for another
    name pinned to the same address, so give one only where that cannot matter (tests, a
    transport that does not pool)."""

    def __init__(
        self,
        policy: NetworkPolicy,
        *,
        inner: httpx2.AsyncBaseTransport | None = None,
        resolver: Resolver | None = None,
        audience: str | None = None,
    ) -> None:
        self.policy = policy
        self._shared = inner
        self._inners: dict[str, httpx2.AsyncBaseTransport] = {}
        self._resolver: Resolver = resolver if resolver is not None else SystemResolver()
        self._audience = parse_url(audience).origin if audience is not None else None
        self._pins: dict[tuple[str, str, int], Addresses] = {}
        self._locks: dict[tuple[str, str, int], anyio.Lock] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        target = check_url(str(request.url), self.policy)
        addresses = await self._pinned(target, request)
        response = await self._send(request, target, addresses)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=response.stream,
            request=request,
            extensions=response.extensions,
        )

    async def _send(self, request: httpx2.Request, target: Target, addresses: Addresses) -> httpx2.Response:
        """``request`` sent to the first of ``addresses`` (never empty) that accepts a connection."""
        inner = self._inner(target)
        failure: httpx2.TransportError | None = None
        for address in addresses:
            try:
                response = await inner.handle_async_request(self._rewrite(request, target, address))
            except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
                failure = exc  # nothing was sent: the next judged address may be where the server listens
                continue
            if address != addresses[0]:  # later requests go straight to the address that answered
                self._pins[_pin_key(target)] = (address, *(a for a in addresses if a != address))
            return response
        assert failure is not None
        raise failure

    async def _pinned(self, target: Target, request: httpx2.Request) -> Addresses:
        """The addresses for ``target``: resolved and judged on first use, then reused."""
        key = _pin_key(target)
        addresses = self._pins.get(key)
        if addresses is not None:
            return addresses  # the common case, once per request: no lock
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = anyio.Lock()
        async with lock:
            addresses = self._pins.get(key)
            if addresses is None:
                try:
                    addresses = await resolve_checked(target, self.policy, self._resolver)
                except OSError as exc:
                    reason = f"cannot resolve {target.host}: {exc}"
                    raise httpx2.ConnectError(reason, request=request) from exc
                self._pins[key] = addresses
        return addresses

    def _rewrite(
        self, request: httpx2.Request, target: Target, address: IPv4Address | IPv6Address
    ) -> httpx2.Request:
        """The request for the inner transport: same method, body and headers, sent to the IP."""
        headers = httpx2.Headers(request.headers)
        headers["Host"] = request.url.netloc.decode("ascii")
        if self._audience is not None and target.origin != self._audience:
            for name in _CREDENTIAL_HEADERS:
                if name in headers and not _client_authentication(name, headers[name]):
                    del headers[name]
                    log.debug(
                        "dropped the %s header: %s is not the audience %s",
                        name,
                        target.origin,
                        self._audience,
                    )
        extensions = dict(request.extensions)
        if target.scheme == "https":
            extensions["sni_hostname"] = target.host
        return httpx2.Request(
            request.method,
            request.url.copy_with(host=str(address)),
            headers=headers,
            stream=request.stream,
            extensions=extensions,
        )

    def _inner(self, target: Target) -> httpx2.AsyncBaseTransport:
        """The transport for ``target``'s origin: the shared one, else one pool per origin."""
        if self._shared is not None:
            return self._shared
        inner = self._inners.get(target.origin)
        if inner is None:
            inner = self._inners[target.origin] = httpx2.AsyncHTTPTransport()
        return inner

    async def aclose(self) -> None:
        inners = [self._shared] if self._shared is not None else list(self._inners.values())
        self._inners.clear()
        for inner in inners:
            await inner.aclose()
