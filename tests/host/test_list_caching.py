"""2026-07-28 caching hints: a listing is fresh for the ``ttlMs`` its server gave it. Once that
has passed, the next call waits for a fresh listing first (the broker settles a relisting
server before it judges a call), so a list that changed unannounced reaches the pins. A
``ttlMs`` of 0 promises nothing and costs no extra listing per call: announcements and the pin
check on every call stay the way codemode learns of changes.

The server is a real Streamable HTTP process (``cached_list_server.py``) whose list grows
without any announcement.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from codemode.config import config_from_mapping
from codemode.host import McpHost
from tests.conftest import HttpServers

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "servers"


def tool_names(host: McpHost) -> list[str]:
    catalog = host.catalog("cached")
    assert catalog is not None
    return [tool.name for tool in catalog.tools]


async def test_a_listing_past_its_ttl_is_listed_again_before_the_next_call(http_servers: HttpServers) -> None:
    url = http_servers.start_script(FIXTURES / "cached_list_server.py", "400")
    server = {"url": url, "allow_loopback": True, "protocol": "2026-07-28"}
    async with McpHost(config_from_mapping({"servers": {"cached": server}})) as host:
        connection = host.connection("cached")
        assert tool_names(host) == ["grow"]
        with anyio.fail_after(30):
            await host.call_tool("cached", "grow", {})
        assert not connection.relisting, "fresh for 400 ms: no listing yet"

        await anyio.sleep(0.5)  # past the ttlMs: the listing is stale

        assert connection.relisting
        with anyio.fail_after(30):
            assert await connection.wait_relisted(30)
        assert tool_names(host) == ["grow", "added_1"]
        assert not connection.relisting


async def test_a_ttl_of_zero_adds_no_listing(http_servers: HttpServers) -> None:
    url = http_servers.start_script(FIXTURES / "cached_list_server.py", "0")
    server = {"url": url, "allow_loopback": True, "protocol": "2026-07-28"}
    async with McpHost(config_from_mapping({"servers": {"cached": server}})) as host:
        connection = host.connection("cached")
        with anyio.fail_after(30):
            await host.call_tool("cached", "grow", {})
        await anyio.sleep(0.2)

        assert not connection.relisting
        assert tool_names(host) == ["grow"]
