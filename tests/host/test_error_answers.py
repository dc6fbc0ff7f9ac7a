"""A server's error answer fails that call only: not the connection, not the calls beside it.

The SDK reports a closed connection as -32000 and a timeout as -32001; a server may answer with
either code (JSON-RPC leaves -32000..-32099 to servers). The server here is a real process over
real pipes (``error_answer_server.py``) that sends the error while another call is in flight.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from codemode.config import config_from_mapping
from codemode.errors import CodemodeError, OutcomeUnknownError
from codemode.host import ConnectionState, McpHost
from codemode.host._transport_end import TransportEnd
from tests.conftest import HttpServers

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "servers"

# The SDK's own two codes, the rest of the implementation-defined band, the band's end, and
# JSON-RPC's internal error.
SERVER_ERROR_CODES = [-32000, -32001, -32007, -32019, -32099, -32603]
NOTE = SessionMessage(mcp_types.JSONRPCNotification(jsonrpc="2.0", method="notifications/x"))


def text_of(result: mcp_types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    return block.text


@pytest.mark.parametrize("code", SERVER_ERROR_CODES)
async def test_an_error_answer_fails_its_call_only_while_another_call_is_in_flight(
    fixture_stdio: Callable[..., dict[str, Any]], code: int
) -> None:
    server = fixture_stdio("error_answer_server", protocol="legacy", call_timeout=60)
    async with McpHost(config_from_mapping({"servers": {"err": server}})) as host:
        connection = host.connection("err")
        pid = text_of(await host.call_tool("err", "pid", {}))
        message = f"the quota of this account is used up ({code})"
        held: list[mcp_types.CallToolResult] = []
        failed: list[CodemodeError] = []

        async def hold() -> None:
            held.append(await host.call_tool("err", "hold", {}))

        async def fail() -> None:
            with pytest.raises(CodemodeError) as caught:
                await host.call_tool("err", "fail", {"code": code, "message": message})
            failed.append(caught.value)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(hold)
                group.start_soon(fail)

        [error] = failed
        assert message in str(error), error
        assert "connection lost" not in str(error) and "no answer within" not in str(error), error
        # The answer came, but a server error may come half-way through: conservative as before.
        assert isinstance(error, OutcomeUnknownError) and "it may have executed" in error.reason
        assert [text_of(result) for result in held] == ["held"], "the concurrent call got its answer"
        assert connection.state is ConnectionState.READY
        assert connection.reconnects == 0
        assert connection.status().error is None
        assert text_of(await host.call_tool("err", "pid", {})) == pid, "the same server, not restarted"


@pytest.mark.parametrize("code", [-32000, -32001, -32603])
async def test_over_http_an_error_answer_fails_its_call_only_while_another_call_is_in_flight(
    http_servers: HttpServers, code: int
) -> None:
    url = http_servers.start_script(FIXTURES / "error_answer_http_server.py")
    server = {"url": url, "allow_loopback": True, "call_timeout": 60}
    async with McpHost(config_from_mapping({"servers": {"err": server}})) as host:
        connection = host.connection("err")
        message = f"the quota of this account is used up ({code})"
        held: list[str] = []

        async def hold() -> None:
            held.append(text_of(await host.call_tool("err", "hold", {})))

        async def holding() -> bool:
            return text_of(await host.call_tool("err", "waiting", {})) == "1"

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(hold)
                while not await holding():
                    await anyio.sleep(0.01)
                with pytest.raises(CodemodeError) as caught:
                    await host.call_tool("err", "fail", {"code": code, "message": message})
                assert message in str(caught.value) and "connection lost" not in str(caught.value)
                assert connection.state is ConnectionState.READY
                await host.call_tool("err", "release", {})
        assert held == ["held"], "the call in flight got its answer"
        assert connection.reconnects == 0 and connection.status().error is None


async def test_a_server_that_really_goes_away_still_loses_the_connection(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    """The other side of the rule: a transport that ended is a lost connection, not an answer."""
    server = fixture_stdio("error_answer_server", protocol="legacy", reconnect=False)
    async with McpHost(config_from_mapping({"servers": {"err": server}})) as host:
        pid = int(text_of(await host.call_tool("err", "pid", {})))
        lost: list[BaseException] = []

        async def hold() -> None:
            with pytest.raises(OutcomeUnknownError) as caught:
                await host.call_tool("err", "hold", {})
            lost.append(caught.value)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(hold)
                await anyio.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
        [error] = lost
        assert "connection lost" in str(error), error
        assert host.connection("err").state is ConnectionState.FAILED


@asynccontextmanager
async def memory_transport(
    reads: MemoryObjectReceiveStream[SessionMessage | Exception],
    writes: MemoryObjectSendStream[SessionMessage],
) -> AsyncGenerator[Any]:
    yield reads, writes


@pytest.mark.parametrize("how", ["read side ends", "session stops reading", "write breaks"])
async def test_a_watched_transport_ends_when_its_read_side_ends_or_a_write_breaks(how: str) -> None:
    to_session, reads = anyio.create_memory_object_stream[SessionMessage | Exception](1)
    writes, from_session = anyio.create_memory_object_stream[SessionMessage](1)
    end = TransportEnd()
    with to_session, from_session:
        async with end.watch(memory_transport(reads, writes)) as (read_stream, write_stream):
            await write_stream.send(NOTE)
            assert await from_session.receive() is NOTE
            assert not end.ended, "a transport that works has not ended"
            if how == "read side ends":
                to_session.close()
                assert [item async for item in read_stream] == []
            elif how == "session stops reading":  # as it does, on every path, before "closed"
                await read_stream.aclose()
            else:
                from_session.close()
                with pytest.raises(anyio.BrokenResourceError):
                    await write_stream.send(NOTE)
            assert end.ended
