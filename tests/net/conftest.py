"""Fixtures of the network guard tests: scripted DNS, a recording transport, a loopback server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.net._fakes import PUBLIC_V4, FakeResolver, LoopbackServer, RecordingTransport


@pytest.fixture
def resolver() -> FakeResolver:
    """``localhost`` is 127.0.0.1; the ``*.example.*`` names used by the tests are public."""
    public = [[PUBLIC_V4]]
    return FakeResolver(
        {
            "localhost": [["127.0.0.1"]],
            "mcp.example.com": public,
            "api.example.org": public,
            "other.example.net": public,
        }
    )


@pytest.fixture
def recorder() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
def loopback_server() -> Iterator[LoopbackServer]:
    with LoopbackServer().running() as server:
        yield server
