"""2026-07-28 parameter headers: an argument a tool marks ``x-mcp-header`` is mirrored into an
``Mcp-Param-*`` header of the call, and a tool whose declaration is invalid is dropped from the
listing, so no stub, search hit or call can reach it.

The server is a real Streamable HTTP process (``header_server.py``) on the SDK's server, which
refuses a call whose header is missing or differs from the body; the tool answers with the header
it saw. The broker's gates see only the call's arguments: the header is made from them by the
host's client, after every gate, so it can never say something the gates did not judge.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp_types
import pytest

from codemode.config import config_from_mapping
from codemode.host import McpHost
from tests.conftest import HttpServers

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "servers"


async def test_a_marked_argument_travels_as_a_header_and_an_invalid_declaration_drops_the_tool(
    http_servers: HttpServers,
) -> None:
    url = http_servers.start_script(FIXTURES / "header_server.py")
    server = {"url": url, "allow_loopback": True, "protocol": "2026-07-28"}
    async with McpHost(config_from_mapping({"servers": {"regions": server}})) as host:
        catalog = host.catalog("regions")
        assert catalog is not None
        assert [tool.name for tool in catalog.tools] == ["lookup"]

        with anyio.fail_after(30):
            result = await host.call_tool("regions", "lookup", {"region": "eu-west", "query": "renewals"})

    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    assert block.text == "lookup: region header eu-west; query renewals"
