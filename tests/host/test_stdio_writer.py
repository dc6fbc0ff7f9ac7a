"""The stdio transport writes each request in the sending task, and a server that stops reading
fails the sends and ends the read side instead of leaving requests waiting."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from codemode.host._stdio import stdio_transport

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

# Answers the first line, then closes its stdin and stays alive (it never exits by itself).
HANG_UP = """
import os, sys, time
line = sys.stdin.readline()
sys.stdout.write('{"jsonrpc": "2.0", "id": 1, "result": {}}\\n')
sys.stdout.flush()
os.close(0)
time.sleep(60)
"""


def _ping(request_id: int) -> SessionMessage:
    return SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="ping"))


async def test_a_server_that_stops_reading_fails_later_sends_and_ends_the_read_side(tmp_path: Path) -> None:
    errlog = (tmp_path / "stderr.log").open("w", encoding="utf-8")
    transport = stdio_transport(
        [sys.executable, "-c", HANG_UP],
        env=None,
        cwd=None,
        errlog=errlog,
        max_message_bytes=1 << 20,
        cut_results={},
    )
    with anyio.fail_after(30):
        async with transport as (read_stream, write_stream):
            await write_stream.send(_ping(1))
            answer = await read_stream.receive()
            assert isinstance(answer, SessionMessage)
            assert isinstance(answer.message, types.JSONRPCResponse)
            broke_at: int | None = None
            for request_id in range(2, 1000):  # a write fails once the server has closed its end
                try:
                    await write_stream.send(_ping(request_id))
                except anyio.BrokenResourceError:
                    broke_at = request_id
                    break
                await anyio.sleep(0.01)
            assert broke_at is not None
            with pytest.raises(anyio.EndOfStream):
                await read_stream.receive()
            with pytest.raises(anyio.BrokenResourceError):
                await write_stream.send(_ping(1000))
        with pytest.raises(anyio.ClosedResourceError):
            await write_stream.send(_ping(1001))
    errlog.close()
