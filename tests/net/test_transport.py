"""GuardedTransport with a recording inner transport: what would have been sent, and where."""

from __future__ import annotations

import logging
import socket

import anyio
import httpx2
import pytest

from codemode.errors import UnsafeURLError
from codemode.net import GuardedTransport, NetworkPolicy
from tests.net._fakes import PUBLIC_V4, PUBLIC_V6, FakeResolver, LoopbackServer, RecordingTransport
from tests.net._hostile import HOSTILE


def _httpx_rejects(url: str) -> bool:
    try:
        httpx2.Request("GET", url)
    except httpx2.InvalidURL:
        return True
    return False


@pytest.mark.anyio
@pytest.mark.parametrize(("url", "reason"), HOSTILE)
async def test_hostile_urls_send_nothing(
    url: str, reason: str, recorder: RecordingTransport, resolver: FakeResolver
) -> None:
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=resolver)
    if _httpx_rejects(url):
        # The client cannot even build this request; nothing can reach the transport.
        with pytest.raises(httpx2.InvalidURL):
            httpx2.Request("GET", url)
    else:
        with pytest.raises(UnsafeURLError):
            await transport.handle_async_request(httpx2.Request("GET", url))
    assert recorder.sent == []
    assert resolver.calls == []


def test_most_of_the_hostile_table_reaches_the_transport() -> None:
    rejected = [url for url, _ in HOSTILE if _httpx_rejects(url)]
    assert len(rejected) <= 6, rejected


@pytest.mark.anyio
async def test_the_request_goes_to_the_pinned_address_with_the_real_name(
    recorder: RecordingTransport, resolver: FakeResolver
) -> None:
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=resolver)
    original = httpx2.Request(
        "POST", "https://api.example.org:8443/mcp?x=1", content=b"{}", extensions={"sni_hostname": "evil"}
    )
    response = await transport.handle_async_request(original)
    (sent,) = recorder.sent
    assert str(sent.url) == f"https://{PUBLIC_V4}:8443/mcp?x=1"
    assert sent.headers["host"] == "api.example.org:8443"
    assert sent.extensions["sni_hostname"] == "api.example.org"
    assert sent.method == "POST"
    assert sent.stream is original.stream
    assert response.request is original
    assert response.status_code == 200
    assert response.extensions["recorded"] is True
    assert await response.aread() == b"ok"


@pytest.mark.anyio
async def test_an_ipv6_pin_is_bracketed(recorder: RecordingTransport) -> None:
    resolver = FakeResolver({"v6.example.com": [[PUBLIC_V6]]})
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=resolver)
    await transport.handle_async_request(httpx2.Request("GET", "https://v6.example.com/"))
    (sent,) = recorder.sent
    assert str(sent.url) == f"https://[{PUBLIC_V6}]/"
    assert sent.extensions["sni_hostname"] == "v6.example.com"
    assert sent.headers["host"] == "v6.example.com"


@pytest.mark.anyio
async def test_dns_rebinding_cannot_move_a_pinned_host(recorder: RecordingTransport) -> None:
    resolver = FakeResolver({"rebind.example.com": [[PUBLIC_V4], ["127.0.0.1"]]})
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=resolver)
    async with httpx2.AsyncClient(transport=transport) as client:
        for _ in range(3):
            assert (await client.get("https://rebind.example.com/x")).status_code == 200
    assert [sent.url.host for sent in recorder.sent] == [PUBLIC_V4] * 3
    assert resolver.calls == [("rebind.example.com", 443)]
    assert recorder.closed


@pytest.mark.anyio
async def test_concurrent_first_requests_resolve_once(
    recorder: RecordingTransport, resolver: FakeResolver
) -> None:
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=resolver)
    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(transport.handle_async_request, httpx2.Request("GET", "https://mcp.example.com/"))
    assert resolver.calls == [("mcp.example.com", 443)]
    assert len(recorder.sent) == 8


@pytest.mark.anyio
async def test_a_refused_record_set_sends_nothing(recorder: RecordingTransport) -> None:
    resolver = FakeResolver({"mixed.example.com": [[PUBLIC_V4, "127.0.0.1"]]})
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=resolver)
    with pytest.raises(UnsafeURLError, match=r"127\.0\.0\.1"):
        await transport.handle_async_request(httpx2.Request("GET", "https://mixed.example.com/"))
    assert recorder.sent == []


@pytest.mark.anyio
async def test_an_unresolvable_name_is_a_connect_error(recorder: RecordingTransport) -> None:
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=FakeResolver({}))
    with pytest.raises(httpx2.ConnectError, match=r"cannot resolve nowhere\.example\.com"):
        await transport.handle_async_request(httpx2.Request("GET", "https://nowhere.example.com/"))
    assert recorder.sent == []


@pytest.mark.anyio
async def test_plain_http_to_a_name_pinned_off_loopback_is_refused(recorder: RecordingTransport) -> None:
    # https may reach a loopback name that resolves elsewhere; plain http to the same pin may not.
    resolver = FakeResolver({"localhost": [[PUBLIC_V4]]})
    transport = GuardedTransport(NetworkPolicy(allow_loopback=True), inner=recorder, resolver=resolver)
    await transport.handle_async_request(httpx2.Request("GET", "https://localhost/"))
    with pytest.raises(UnsafeURLError, match="plain http"):
        await transport.handle_async_request(httpx2.Request("GET", "http://localhost:443/"))
    assert len(recorder.sent) == 1


SECRET = "Bearer s3cr3t-token"


@pytest.mark.anyio
@pytest.mark.parametrize("audience", ["https://mcp.example.com:443", "https://MCP.example.com/mcp"])
@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("https://mcp.example.com/mcp", True),
        ("https://mcp.example.com:443/other", True),
        ("https://Mcp.Example.com./mcp", True),
        ("https://mcp.example.com:8443/mcp", False),
        ("https://other.example.net/mcp", False),
        ("https://api.example.org/", False),
    ],
)
async def test_credentials_reach_only_the_audience(
    audience: str,
    url: str,
    kept: bool,
    recorder: RecordingTransport,
    resolver: FakeResolver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=resolver, audience=audience)
    headers = {"Authorization": SECRET, "Cookie": "session=s3cr3t-cookie", "X-Other": "1"}
    with caplog.at_level(logging.DEBUG, logger="codemode.net"):
        await transport.handle_async_request(httpx2.Request("GET", url, headers=headers))
    (sent,) = recorder.sent
    assert sent.headers["x-other"] == "1"
    if kept:
        assert sent.headers["authorization"] == SECRET
        assert sent.headers["cookie"] == "session=s3cr3t-cookie"
    else:
        assert "authorization" not in sent.headers
        assert "cookie" not in sent.headers
        assert "dropped the authorization header" in caplog.text
    assert "s3cr3t" not in caplog.text


@pytest.mark.anyio
async def test_client_authentication_reaches_another_origin_but_a_token_does_not(
    recorder: RecordingTransport, resolver: FakeResolver
) -> None:
    """An OAuth client authenticates to the token endpoint (another origin) with Basic."""
    audience = "https://mcp.example.com/mcp"
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=resolver, audience=audience)
    for value in ("Basic Y2xpZW50OnNlY3JldA==", "Bearer s3cr3t-token", "DPoP s3cr3t-token"):
        request = httpx2.Request("POST", "https://other.example.net/token", headers={"Authorization": value})
        await transport.handle_async_request(request)
    kept = [sent.headers.get("authorization") for sent in recorder.sent]
    assert kept == ["Basic Y2xpZW50OnNlY3JldA==", None, None]


@pytest.mark.anyio
async def test_without_an_audience_headers_pass_unchanged(
    recorder: RecordingTransport, resolver: FakeResolver
) -> None:
    transport = GuardedTransport(NetworkPolicy(), inner=recorder, resolver=resolver)
    request = httpx2.Request("GET", "https://other.example.net/", headers={"Authorization": SECRET})
    await transport.handle_async_request(request)
    assert recorder.sent[0].headers["authorization"] == SECRET


@pytest.mark.anyio
async def test_aclose_closes_the_inner_transport(recorder: RecordingTransport) -> None:
    transport = GuardedTransport(NetworkPolicy(), inner=recorder)
    await transport.aclose()
    assert recorder.closed


class _Dialled(httpx2.AsyncBaseTransport):
    """A real transport that notes every address it is asked to dial."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self._real = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.hosts.append(request.url.host)
        return await self._real.handle_async_request(request)

    async def aclose(self) -> None:
        await self._real.aclose()


@pytest.mark.integration
@pytest.mark.anyio
async def test_a_name_whose_first_address_refuses_is_reached_at_the_next(
    loopback_server: LoopbackServer,
) -> None:
    # The server listens on 127.0.0.1 only; "localhost" resolves to ::1 first, as it often does.
    dialled = _Dialled()
    resolver = FakeResolver({"localhost": [["::1", "127.0.0.1"]]})
    transport = GuardedTransport(NetworkPolicy(allow_loopback=True), inner=dialled, resolver=resolver)
    async with httpx2.AsyncClient(transport=transport) as client:
        for _ in range(2):
            response = await client.get(f"http://localhost:{loopback_server.port}/x")
            assert response.status_code == 200 and response.text == f"localhost:{loopback_server.port}"
    assert dialled.hosts == ["::1", "127.0.0.1", "127.0.0.1"], "the address that answered goes first"
    assert resolver.calls == [("localhost", loopback_server.port)], "still resolved and judged once"


@pytest.mark.integration
@pytest.mark.anyio
async def test_when_no_address_accepts_the_connect_error_is_raised() -> None:
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dialled = _Dialled()
    resolver = FakeResolver({"localhost": [["::1", "127.0.0.1"]]})
    transport = GuardedTransport(NetworkPolicy(allow_loopback=True), inner=dialled, resolver=resolver)
    with pytest.raises(httpx2.ConnectError):
        await transport.handle_async_request(httpx2.Request("GET", f"http://localhost:{port}/"))
    assert dialled.hosts == ["::1", "127.0.0.1"]
    await transport.aclose()
