"""A stdio server that answers with bytes that are not UTF-8, or with 100 MB: one call pays, not the host.

The server is a real process over real pipes (``raw_server.py bad_answers``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from codemode.config import config_from_mapping
from codemode.errors import CodemodeError, OutcomeUnknownError
from codemode.host import McpHost
from codemode.host._frames import TRUNCATED_META

pytestmark = pytest.mark.anyio

HUGE_BYTES = 100 * 1024 * 1024
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "servers"


def text_of(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


async def test_a_reply_that_is_not_utf8_fails_that_call_and_the_next_call_works(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    server = fixture_stdio("raw_server", "bad_answers", protocol="legacy", call_timeout=120)
    async with McpHost(config_from_mapping({"servers": {"raw": server}})) as host:
        with pytest.raises(Exception, match="not UTF-8") as caught:
            await host.call_tool("raw", "garble", {})
        # Answered (badly), so not a timeout: the call is not left 'unknown' for reconcile.
        assert not isinstance(caught.value, OutcomeUnknownError)
        assert text_of(await host.call_tool("raw", "ping", {})) == "pong"
        # A line of noise with no id is dropped; the answer after it still arrives.
        assert text_of(await host.call_tool("raw", "noise", {})) == "pong"
        assert text_of(await host.call_tool("raw", "ping", {})) == "pong"


async def test_a_100_mb_result_arrives_ok_cut_at_the_cap_with_a_marker(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    cap = 1024 * 1024
    server = fixture_stdio("raw_server", "bad_answers", protocol="legacy", max_message_bytes=cap)
    async with McpHost(config_from_mapping({"servers": {"raw": server}})) as host:
        result = await host.call_tool("raw", "huge", {})
        assert result.is_error is False
        text = text_of(result)
        kept, marker = text.split("\n[truncated by codemode", 1)
        assert 0 < len(kept) < cap and kept.startswith("0123456789abcdef")
        assert "over this server's cap of 1,048,576" in marker
        assert result.meta is not None
        assert result.meta[TRUNCATED_META]["size"] > HUGE_BYTES
        assert text_of(await host.call_tool("raw", "ping", {})) == "pong"


def test_reading_a_100_mb_result_does_not_hold_it_in_memory(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    """Peak RSS of a fresh host process that receives the 100 MB answer (default cap, 16 MiB)."""
    server = fixture_stdio("raw_server", "bad_answers", protocol="legacy")
    script = textwrap.dedent(
        """
        import json, resource, sys
        import anyio
        from codemode.config import config_from_mapping
        from codemode.host import McpHost

        async def main() -> None:
            config = config_from_mapping({"servers": {"raw": json.loads(sys.argv[1])}})
            async with McpHost(config) as host:
                before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                result = await host.call_tool("raw", "huge", {})
                after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                print(json.dumps({"before_kb": before, "after_kb": after, "meta": result.meta}))

        anyio.run(main)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(server)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["meta"][TRUNCATED_META]["size"] > HUGE_BYTES
    grown_mb = (figures["after_kb"] - figures["before_kb"]) / 1024
    # Holding the answer whole costs at least its 100 MB (the SDK's reader measured ~600 MB).
    print(f"host RSS grew {grown_mb:.1f} MB reading a 100 MB answer")
    assert grown_mb < 100, f"host RSS grew {grown_mb:.0f} MB while reading a 100 MB answer"


@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_a_100_mb_result_over_http_arrives_ok_cut_at_the_cap(http_servers: Any, mode: str) -> None:
    """The same cap over Streamable HTTP, for a JSON body and for a server-sent event."""
    url = http_servers.start_script(FIXTURES / "big_server.py", mode, timeout=60)
    cap = 1024 * 1024
    server = {"url": url, "max_message_bytes": cap, "call_timeout": 120, "allow_loopback": True}
    async with McpHost(config_from_mapping({"servers": {"big": server}})) as host:
        [status] = host.statuses()
        assert status.error is None, status.error
        result = await host.call_tool("big", "huge", {})
        assert result.is_error is False
        kept, marker = text_of(result).split("\n[truncated by codemode", 1)
        assert 0 < len(kept) < cap and kept.startswith("0123456789abcdef")
        assert result.meta is not None and result.meta[TRUNCATED_META]["size"] > HUGE_BYTES
        assert "over this server's cap of 1,048,576" in marker
        assert text_of(await host.call_tool("big", "ping", {})) == "pong"


async def test_a_cut_result_of_a_tool_with_an_output_schema_is_still_the_answer(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    """The SDK checks results against the tool's output schema; a cut one cannot match, and the
    call must not become 'unknown' for that (it completed)."""
    server = fixture_stdio("big_server", "stdio", max_message_bytes=1024 * 1024, call_timeout=120)
    async with McpHost(config_from_mapping({"servers": {"big": server}})) as host:
        catalog = host.catalog("big")
        huge = catalog.tool("huge") if catalog is not None else None
        assert huge is not None and huge.output_schema is not None
        result = await host.call_tool("big", "huge", {})
        assert result.is_error is False
        assert "[truncated by codemode" in text_of(result)
        assert text_of(await host.call_tool("big", "ping", {})) == "pong"


async def test_a_slow_start_is_bounded_by_connect_timeout_and_each_call_by_call_timeout(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    """The handshake and the listing take a second each, longer than call_timeout: the server still
    connects, because they are bounded by connect_timeout, while a call keeps its own short limit."""
    server = fixture_stdio("raw_server", "slow", protocol="legacy", call_timeout=0.5, connect_timeout=60)
    async with McpHost(config_from_mapping({"servers": {"slow": server}})) as host:
        [status] = host.statuses()
        assert status.error is None, status.error
        assert text_of(await host.call_tool("slow", "ping", {})) == "pong"
        with pytest.raises(OutcomeUnknownError, match=r"no answer within call_timeout = 0\.5 s"):
            await host.call_tool("slow", "sleepy", {})
        with pytest.raises(
            CodemodeError, match=r"^slow/slow://r: no answer within call_timeout = 0\.5 s$"
        ) as read:
            await host.connection("slow").read_resource("slow://r")
        assert not isinstance(read.value, OutcomeUnknownError), "a read has no outcome to reconcile"
