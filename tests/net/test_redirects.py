"""Redirect chains through a real HTTP server on 127.0.0.1: every hop passes the guard.

The client follows redirects itself and sends each hop through the transport, so a hop that
leads somewhere refused raises :class:`UnsafeURLError` out of ``client.get`` before it is sent."""

from __future__ import annotations

import httpx2
import pytest

from codemode.errors import UnsafeURLError
from codemode.net import GuardedTransport, NetworkPolicy
from tests.net._fakes import FakeResolver, LoopbackServer

pytestmark = pytest.mark.integration

LOOPBACK_OK = NetworkPolicy(allow_loopback=True)


def _client(resolver: FakeResolver) -> httpx2.AsyncClient:
    transport = GuardedTransport(LOOPBACK_OK, resolver=resolver)
    return httpx2.AsyncClient(transport=transport, follow_redirects=True)


@pytest.mark.anyio
async def test_a_chain_of_good_hops_keeps_the_host_name(
    loopback_server: LoopbackServer, resolver: FakeResolver
) -> None:
    port = loopback_server.port
    loopback_server.redirects["/a"] = "/b"
    loopback_server.redirects["/b"] = f"http://localhost:{port}/c"
    async with _client(resolver) as client:
        response = await client.get(f"http://localhost:{port}/a")
    assert response.status_code == 200
    assert response.text == f"localhost:{port}"
    assert str(response.url) == f"http://localhost:{port}/c"
    assert [str(r.url) for r in response.history] == [
        f"http://localhost:{port}/a",
        f"http://localhost:{port}/b",
    ]
    assert loopback_server.hits == [(p, f"localhost:{port}") for p in ("/a", "/b", "/c")]
    assert resolver.calls == [("localhost", port)]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("file:///etc/passwd", "scheme 'file'"),
        ("gopher://127.0.0.1/", "scheme 'gopher'"),
        ("http://user@127.0.0.1:{port}/", "credentials"),
        ("http://[fe80::1%25lo]/", "zone id"),
        ("http://[64:ff9b::7f00:1]:{port}/", "plain http"),
        ("http://mcp.example.com/", "plain http"),
    ],
)
async def test_a_hop_to_a_refused_place_raises(
    location: str, reason: str, loopback_server: LoopbackServer, resolver: FakeResolver
) -> None:
    port = loopback_server.port
    loopback_server.redirects["/start"] = location.format(port=port)
    async with _client(resolver) as client:
        with pytest.raises(UnsafeURLError, match=reason):
            await client.get(f"http://localhost:{port}/start")
    assert [path for path, _ in loopback_server.hits] == ["/start"]


@pytest.mark.anyio
async def test_two_good_hops_then_a_refused_one(
    loopback_server: LoopbackServer, resolver: FakeResolver
) -> None:
    port = loopback_server.port
    loopback_server.redirects["/1"] = f"http://127.0.0.1:{port}/2"
    loopback_server.redirects["/2"] = f"http://localhost:{port}/3"
    loopback_server.redirects["/3"] = f"http://0.0.0.0:{port}/4"
    async with _client(resolver) as client:
        with pytest.raises(UnsafeURLError, match="unspecified"):
            await client.get(f"http://localhost:{port}/1")
    assert [path for path, _ in loopback_server.hits] == ["/1", "/2", "/3"]


@pytest.mark.anyio
async def test_loopback_is_refused_when_not_allowed(
    loopback_server: LoopbackServer, resolver: FakeResolver
) -> None:
    transport = GuardedTransport(NetworkPolicy(), resolver=resolver)
    async with httpx2.AsyncClient(transport=transport) as client:
        with pytest.raises(UnsafeURLError, match="allow_loopback = true"):
            await client.get(f"http://127.0.0.1:{loopback_server.port}/")
    assert loopback_server.hits == []
