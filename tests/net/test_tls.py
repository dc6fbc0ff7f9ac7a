"""TLS through a pinned address: the certificate is checked against the name, not the IP.

A real TLS server on 127.0.0.1 presents a certificate for ``mcp.example.test`` only. The fake
resolver maps names to 127.0.0.1; the transport connects to the IP and must still verify the
name (``sni_hostname``), so the right name succeeds and any other name fails the handshake."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from codemode.net import GuardedTransport, NetworkPolicy
from tests.net._fakes import FakeResolver, LoopbackServer, RecordingTransport
from tests.net._tls import make_tls

NAME = "mcp.example.test"


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[LoopbackServer, httpx2.AsyncHTTPTransport]]:
    server_context, client_context = make_tls(tmp_path, NAME)
    with LoopbackServer(server_context).running() as server:
        yield server, httpx2.AsyncHTTPTransport(verify=client_context)


def _client(inner: httpx2.AsyncBaseTransport) -> httpx2.AsyncClient:
    resolver = FakeResolver({NAME: [["127.0.0.1"]], "other.example.test": [["127.0.0.1"]]})
    transport = GuardedTransport(NetworkPolicy(allow_loopback=True), inner=inner, resolver=resolver)
    return httpx2.AsyncClient(transport=transport)


@pytest.mark.integration
@pytest.mark.anyio
async def test_the_pinned_connection_verifies_the_real_name(
    tls_server: tuple[LoopbackServer, httpx2.AsyncHTTPTransport],
) -> None:
    server, inner = tls_server
    async with _client(inner) as client:
        response = await client.get(f"https://{NAME}:{server.port}/mcp")
    assert response.status_code == 200
    assert response.text == f"{NAME}:{server.port}"
    assert str(response.url) == f"https://{NAME}:{server.port}/mcp"


@pytest.mark.integration
@pytest.mark.anyio
async def test_another_name_on_the_same_address_fails_verification(
    tls_server: tuple[LoopbackServer, httpx2.AsyncHTTPTransport],
) -> None:
    server, inner = tls_server
    async with _client(inner) as client:
        with pytest.raises(httpx2.ConnectError, match=r"(?i)certificate"):
            await client.get(f"https://other.example.test:{server.port}/mcp")
    assert server.hits == []


@pytest.mark.anyio
async def test_https_carries_the_original_name_as_sni() -> None:
    recorder = RecordingTransport()
    async with _client(recorder) as client:
        await client.get(f"https://{NAME}/mcp")
        await client.get("http://127.0.0.1:9/")
    https, plain = recorder.sent
    assert https.url.host == "127.0.0.1"
    assert https.extensions["sni_hostname"] == NAME
    assert "sni_hostname" not in plain.extensions


@pytest.mark.integration
@pytest.mark.anyio
async def test_the_default_pools_never_share_a_tls_session_between_names(
    tls_server: tuple[LoopbackServer, httpx2.AsyncHTTPTransport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both names are pinned to 127.0.0.1. The first request opens a connection verified for
    # NAME; the second name must not ride it, so its own handshake fails.
    server, _ = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # the default inner trusts the test CA
    resolver = FakeResolver({NAME: [["127.0.0.1"]], "other.example.test": [["127.0.0.1"]]})
    transport = GuardedTransport(NetworkPolicy(allow_loopback=True), resolver=resolver)
    async with httpx2.AsyncClient(transport=transport) as client:
        assert (await client.get(f"https://{NAME}:{server.port}/a")).status_code == 200
        with pytest.raises(httpx2.ConnectError, match=r"(?i)certificate"):
            await client.get(f"https://other.example.test:{server.port}/b")
    assert [path for path, _ in server.hits] == ["/a"]
