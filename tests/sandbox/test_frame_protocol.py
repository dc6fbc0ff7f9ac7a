"""The host channel's frame protocol on real sockets: chunking, limits, EOF and backpressure."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.calls import RunBinding
from codemode.sandbox._channel import HostChannel, RunContext
from codemode.sandbox._frame_protocol import FrameProtocol
from codemode.sandbox._framing import THREAD_DECODE_BYTES, ChannelClosed, FrameTooLarge, MalformedMessage
from tests.sandbox._channel_kit import BlockingHandler, NoModules, frame, hello, read_frame

pytestmark = pytest.mark.anyio


async def _protocol(max_frame_bytes: int = 1 << 20) -> tuple[FrameProtocol, socket.socket, list[Any]]:
    """A FrameProtocol on one end of a real socket pair, collecting what it delivers."""
    host, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    host.setblocking(False)
    protocol = FrameProtocol(max_frame_bytes)
    received: list[Any] = []
    protocol.sink = received.append
    await asyncio.get_running_loop().connect_accepted_socket(lambda: protocol, host)
    return protocol, peer, received


async def _until(condition: Any) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.005)


async def test_a_frame_split_into_single_bytes_arrives_whole() -> None:
    protocol, peer, received = await _protocol()
    data = frame({"a": [1, 2, 3], "b": "x" * 100})
    for byte in data:
        peer.send(bytes([byte]))
        await anyio.sleep(0.001)  # one byte per data_received
    await _until(lambda: received)
    assert received == [{"a": [1, 2, 3], "b": "x" * 100}]
    protocol.close()
    peer.close()


async def test_many_frames_in_one_chunk_arrive_in_order() -> None:
    protocol, peer, received = await _protocol()
    peer.sendall(b"".join(frame({"n": n}) for n in range(500)))
    await _until(lambda: len(received) == 500)
    assert received == [{"n": n} for n in range(500)]
    assert not protocol.is_closed
    protocol.close()
    peer.close()


async def test_a_big_body_is_decoded_off_the_loop_and_order_is_kept() -> None:
    protocol, peer, received = await _protocol(max_frame_bytes=4 * THREAD_DECODE_BYTES)
    big = {"big": "y" * (2 * THREAD_DECODE_BYTES)}
    data = frame({"n": 1}) + frame(big) + frame({"n": 2})
    await anyio.to_thread.run_sync(peer.sendall, data)  # more than the socket buffers
    await _until(lambda: len(received) == 3)
    assert received == [{"n": 1}, big, {"n": 2}]
    protocol.close()
    peer.close()


async def test_an_oversize_header_closes_the_connection_before_the_body_arrives() -> None:
    protocol, peer, received = await _protocol(max_frame_bytes=1024)
    peer.sendall(struct.pack(">I", 1025))  # the header alone: no body is ever sent
    with anyio.fail_after(10):
        await protocol.closed.wait()
    assert isinstance(protocol.error, FrameTooLarge)
    assert received == []
    peer.settimeout(10)
    assert peer.recv(10) == b""  # the host hung up
    peer.close()


async def test_an_oversize_header_is_refused_even_while_the_flow_is_held() -> None:
    protocol, peer, received = await _protocol(max_frame_bytes=1024)
    protocol.hold()
    peer.sendall(frame({"n": 1}) + struct.pack(">I", 1 << 30))
    protocol.release()
    with anyio.fail_after(10):
        await protocol.closed.wait()
    assert isinstance(protocol.error, FrameTooLarge)
    assert received == [{"n": 1}]
    peer.close()


async def test_eof_in_the_middle_of_a_frame_closes_the_channel() -> None:
    protocol, peer, received = await _protocol()
    data = frame({"n": 1}) + frame({"n": 2})
    peer.sendall(data[:-3])
    peer.shutdown(socket.SHUT_WR)
    with anyio.fail_after(10):
        await protocol.closed.wait()
    assert isinstance(protocol.error, ChannelClosed)
    assert received == [{"n": 1}]
    peer.close()


async def test_a_malformed_body_closes_the_channel() -> None:
    protocol, peer, received = await _protocol()
    peer.sendall(struct.pack(">I", 5) + b"[1, }")
    with anyio.fail_after(10):
        await protocol.closed.wait()
    assert isinstance(protocol.error, MalformedMessage)
    assert received == []
    peer.close()


async def test_a_held_flow_stops_reading_and_resumes_on_release() -> None:
    protocol, peer, received = await _protocol()
    protocol.hold()
    peer.sendall(frame({"n": 1}) + frame({"n": 2}))
    await anyio.sleep(0.05)
    assert received == []
    protocol.release()
    await _until(lambda: len(received) == 2)
    protocol.close()
    peer.close()


# -- the channel over the protocol: in-flight limit ----------------------------------------------


async def _connected(tmp_path: Path, max_inflight: int) -> tuple[HostChannel, socket.socket]:
    channel = HostChannel(tmp_path / "ch", max_frame_bytes=1 << 20, max_inflight=max_inflight)
    # A pipelined request right behind the hello must wait for serve(), not be lost.
    shell = frame({"jsonrpc": "2.0", "id": 2, "method": "shell", "params": {}})
    sock = await hello(channel, tmp_path / "ch", then=shell)
    return channel, sock


async def test_at_the_in_flight_limit_the_channel_stops_reading_until_a_call_finishes(tmp_path: Path) -> None:
    channel, sock = await _connected(tmp_path, max_inflight=2)
    handler = BlockingHandler()
    binding = RunBinding(run_id="run_t", principal="local", tenant="default", trace_id="t")
    channel.bind(RunContext(binding=binding, modules=NoModules(), handler=handler))
    params: dict[str, Any] = {"server": "s", "tool": "t", "schema_hash": "h", "arguments": {}}
    async with anyio.create_task_group() as tg:
        tg.start_soon(channel.serve)
        early = await anyio.to_thread.run_sync(read_frame, sock)
        assert early["id"] == 2
        assert early["error"]["code"] == -32601
        sock.sendall(
            b"".join(
                frame({"jsonrpc": "2.0", "id": 10 + n, "method": "call", "params": params}) for n in range(5)
            )
        )
        await _until(lambda: handler.started == 2)
        await anyio.sleep(0.1)
        assert handler.started == 2  # the other three wait in the buffer, unread
        handler.gate.set()
        replies = [await anyio.to_thread.run_sync(read_frame, sock) for _ in range(5)]
        assert handler.peak == 2
        assert sorted(r["id"] for r in replies) == [10, 11, 12, 13, 14]
        assert handler.started == 5
        # Host-to-sandbox requests still work on the same connection.
        asked: list[Any] = []

        async def ask() -> None:
            asked.append(await channel.request("snapshot", {}))

        tg.start_soon(ask)
        request = await anyio.to_thread.run_sync(read_frame, sock)
        assert request["method"] == "snapshot"
        sock.sendall(frame({"jsonrpc": "2.0", "id": request["id"], "result": {"stdout": "hi"}}))
        await _until(lambda: asked)
        assert asked == [{"stdout": "hi"}]
        sock.shutdown(socket.SHUT_WR)
        with anyio.fail_after(10):
            await channel.wait_closed()
    assert not channel.violated
    assert channel.close_reason == "the connection closed"
    sock.close()


async def test_a_violation_after_the_hello_closes_the_channel_as_a_violation(tmp_path: Path) -> None:
    channel, sock = await _connected(tmp_path, max_inflight=4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(channel.serve)
        await anyio.to_thread.run_sync(read_frame, sock)  # the early request's error
        sock.sendall(frame({"not": "json-rpc"}))
        with anyio.fail_after(10):
            await channel.wait_closed()
    assert channel.violated
    assert channel.close_reason is not None
    assert "protocol violation" in channel.close_reason
    with pytest.raises(ChannelClosed):
        await channel.request("snapshot", {})
    sock.close()
