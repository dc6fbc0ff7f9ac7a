"""What a frame from the sandbox may decode to: values and depth are bounded before it is parsed,
requests are smaller than the frame limit, and requests in flight are bounded in bytes and values.

A 16 MiB frame of ``[[],[],…]`` is legal by size but decodes to 5.5 million lists: the host must
refuse it from its text, before ``json.loads`` builds anything, and must not hold many big ones at
once for a slow tool.
"""

# pyright: reportPrivateUsage=false
# (the spy replaces the wire's JSON decoder to see whether a refused body was ever parsed)

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.calls import RunBinding
from codemode.sandbox import _wire as wire
from codemode.sandbox._channel import HostChannel, RunContext, request_limit
from codemode.sandbox._frame_protocol import FrameProtocol
from codemode.sandbox._framing import MalformedMessage, decode, decode_counted
from tests.sandbox._channel_kit import BlockingHandler, NoModules, frame, hello, read_frame

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


class _SpyDecoder:
    """Stands in for the wire's JSON decoder and counts the bodies it was given."""

    def __init__(self) -> None:
        self.parsed = 0

    def decode(self, text: str) -> Any:
        self.parsed += 1
        return json.loads(text)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _SpyDecoder:
    decoder = _SpyDecoder()
    monkeypatch.setattr(wire, "_DECODER", decoder)
    return decoder


def _lists(count: int) -> bytes:
    """``[[],[],…]`` holding ``count`` empty lists: three bytes a value."""
    return b"[" + b",".join([b"[]"] * count) + b"]"


# -- the scan, before parsing --------------------------------------------------------------------


def test_a_body_of_too_many_values_is_refused_before_it_is_parsed(spy: _SpyDecoder) -> None:
    body = _lists(wire.MAX_VALUES + 1)  # about 3 MiB, well under the frame limit
    with pytest.raises(MalformedMessage, match=f"more than {wire.MAX_VALUES} JSON values"):
        decode(body)
    assert spy.parsed == 0
    # Commas in strings are text, not values: a long CSV line is one value.
    text = json.dumps({"csv": ",".join(["x"] * (wire.MAX_VALUES + 10))}).encode()
    assert decode(text)["csv"].count(",") == wire.MAX_VALUES + 9
    assert spy.parsed == 1


def test_a_body_nested_too_deeply_is_refused_before_it_is_parsed(spy: _SpyDecoder) -> None:
    nested = b"[" * 65 + b"]" * 65
    hidden = b'{"pad":"]]]]\\"]]]]","deep":' + nested + b"}"  # closing brackets in a string hide nothing
    wide = b"[" + b",".join([b"[" * 30 + b"]" * 30] * 2000 + [nested]) + b"]"
    for body in (nested, hidden, wide, b"[" * 100_000 + b"]" * 100_000):
        with pytest.raises(MalformedMessage, match="nested too deeply"):
            decode(body)
    with pytest.raises(MalformedMessage, match="not valid JSON"):
        decode(b"]" * 100 + b"[" * 100)
    assert spy.parsed == 0


def test_legit_bodies_decode_and_report_an_upper_bound_of_their_values(spy: _SpyDecoder) -> None:
    records = [{"id": n, "tags": ["a", "b,c"], "note": "[{" * 40} for n in range(20_000)]
    body = json.dumps({"rows": records}).encode()
    message, values = decode_counted(body)
    assert message == {"rows": records}
    # Counted exactly (its strings' brackets make it worth it): per record its braces, two commas
    # between members, the tags' bracket and comma, and the comma before the next record.
    assert values == 2 + 20_000 * 6 - 1
    exactly = b"[" * 64 + b"]" * 64
    assert decode_counted(exactly)[0] == json.loads(exactly)
    small = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "call", "params": {}}).encode()
    assert decode_counted(small) == (json.loads(small), len(small))  # a small body counts its bytes
    assert spy.parsed == 3


def test_the_runtime_end_takes_any_number_of_values_from_the_host() -> None:
    body = _lists(wire.MAX_VALUES + 1)
    assert len(wire.decode_body(body)) == wire.MAX_VALUES + 1  # the host is trusted
    with pytest.raises(wire.WireError, match="JSON values"):
        wire.scan_body(body, max_values=wire.MAX_VALUES)


# -- the frame protocol --------------------------------------------------------------------------


async def _until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.005)


async def test_a_frame_of_too_many_values_closes_the_connection_unparsed(spy: _SpyDecoder) -> None:
    host, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    host.setblocking(False)
    protocol = FrameProtocol(16 * MiB)
    received: list[Any] = []
    protocol.sink = received.append
    await asyncio.get_running_loop().connect_accepted_socket(lambda: protocol, host)
    data = frame({"n": 1}) + frame(_lists(wire.MAX_VALUES + 1))
    await anyio.to_thread.run_sync(peer.sendall, data)
    with anyio.fail_after(10):
        await protocol.closed.wait()
    assert isinstance(protocol.error, MalformedMessage)
    assert "JSON values" in str(protocol.error)
    assert received == [{"n": 1}]
    assert spy.parsed == 1  # the small frame only
    peer.settimeout(10)
    assert peer.recv(10) == b""  # the host hung up
    peer.close()


# -- the channel: requests' size, requests in flight ---------------------------------------------


def test_a_request_may_use_a_quarter_of_a_big_frame_limit_and_at_least_4_mib() -> None:
    assert request_limit(16 * MiB) == 4 * MiB  # the default frame limit
    assert request_limit(64 * MiB) == 16 * MiB
    assert request_limit(8 * MiB) == 4 * MiB
    assert request_limit(1 * MiB) == 1 * MiB
    channel = HostChannel(Path("/nonexistent/ch"), max_frame_bytes=16 * MiB)
    assert channel.max_request_bytes == 4 * MiB


async def _connected(
    tmp_path: Path,
    *,
    max_inflight: int = 32,
    max_request_bytes: int | None = None,
    max_inflight_bytes: int | None = None,
    max_inflight_values: int = wire.MAX_VALUES,
) -> tuple[HostChannel, socket.socket, BlockingHandler]:
    channel = HostChannel(
        tmp_path / "ch",
        max_frame_bytes=4 * MiB,
        max_inflight=max_inflight,
        max_request_bytes=max_request_bytes,
        max_inflight_bytes=max_inflight_bytes,
        max_inflight_values=max_inflight_values,
    )
    sock = await hello(channel, tmp_path / "ch")
    handler = BlockingHandler()
    binding = RunBinding(run_id="run_t", principal="local", tenant="default", trace_id="t")
    channel.bind(RunContext(binding=binding, modules=NoModules(), handler=handler))
    return channel, sock, handler


def _call(request_id: int, arguments: dict[str, Any]) -> bytes:
    params = {"server": "s", "tool": "t", "schema_hash": "h", "arguments": arguments}
    return frame({"jsonrpc": "2.0", "id": request_id, "method": "call", "params": params})


async def test_a_request_over_its_limit_is_refused_and_the_channel_carries_on(tmp_path: Path) -> None:
    channel, sock, handler = await _connected(tmp_path, max_request_bytes=64 * 1024)
    handler.gate.set()
    async with anyio.create_task_group() as tg:
        tg.start_soon(channel.serve)
        big = _call(5, {"blob": "x" * 100_000})
        await anyio.to_thread.run_sync(sock.sendall, big + _call(6, {"a": 1}))
        refused = await anyio.to_thread.run_sync(read_frame, sock)
        assert refused["id"] == 5
        assert refused["error"]["code"] == wire.INVALID_REQUEST
        assert refused["error"]["message"] == (
            f"request of {len(big) - 4} bytes is over the limit of 65536 bytes for a request"
        )
        answered = await anyio.to_thread.run_sync(read_frame, sock)
        assert answered["id"] == 6
        assert answered["result"]["kind"] == "ok"
        assert handler.started == 1  # the big one never reached the handler
        # An answer to the host may still use the whole frame limit.
        asked: list[Any] = []

        async def ask() -> None:
            asked.append(await channel.request("snapshot", {}))

        tg.start_soon(ask)
        request = await anyio.to_thread.run_sync(read_frame, sock)
        reply = {"stdout": "y" * MiB}
        await anyio.to_thread.run_sync(
            sock.sendall, frame({"jsonrpc": "2.0", "id": request["id"], "result": reply})
        )
        await _until(lambda: bool(asked))
        assert asked == [reply]
        sock.shutdown(socket.SHUT_WR)
        with anyio.fail_after(10):
            await channel.wait_closed()
    assert not channel.violated
    sock.close()


@pytest.mark.parametrize(
    ("limits", "arguments"),
    [
        ({"max_inflight_bytes": 250_000}, {"blob": "x" * 100_000}),  # 100 kB each, 3 to pass 250 kB
        ({"max_inflight_values": 7_000}, {"numbers": [0] * 3_000}),  # 3,000 values each, 3 to pass 7,000
    ],
    ids=["bytes", "values"],
)
async def test_requests_in_flight_stop_the_reading_once_they_hold_their_budget(
    tmp_path: Path, limits: dict[str, int], arguments: dict[str, Any]
) -> None:
    channel, sock, handler = await _connected(tmp_path, max_inflight=32, **limits)
    async with anyio.create_task_group() as tg:
        tg.start_soon(channel.serve)
        calls = b"".join(_call(10 + n, arguments) for n in range(6))
        await anyio.to_thread.run_sync(sock.sendall, calls)  # fits in the socket's buffers
        await _until(lambda: handler.started == 3)
        await anyio.sleep(0.1)
        assert handler.started == 3  # the budget is reached: the other three wait, unread
        handler.gate.set()
        replies = [await anyio.to_thread.run_sync(read_frame, sock) for _ in range(6)]
        assert sorted(r["id"] for r in replies) == list(range(10, 16))
        assert all(r["result"]["kind"] == "ok" for r in replies)
        assert handler.peak == 3
        assert handler.started == 6
        sock.shutdown(socket.SHUT_WR)
        with anyio.fail_after(10):
            await channel.wait_closed()
    assert not channel.violated
    sock.close()


# -- the real runtime ----------------------------------------------------------------------------


@pytest.mark.integration
async def test_a_programs_call_over_the_request_limit_raises_and_the_run_goes_on(
    run_program: Callable[..., Any], handler: Any
) -> None:
    code = (
        "import codemode_runtime as rt\n"
        "add = {'server': 'demo', 'tool': 'add', 'schema_hash': 'h'}\n"
        "big = {'a': 1, 'b': 2, 'pad': 'x' * (5 << 20)}\n"
        "try:\n"
        "    answers = [rt._request('call', {**add, 'arguments': big})]\n"
        "except rt._RemoteError as exc:\n"
        "    answers = [exc.code, str(exc)]\n"
        "answers.append(rt.call_tool('demo', 'add', 'h', {'a': 1, 'b': 2}))\n"
        "answers\n"
    )
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    code_, message, total = outcome.result
    assert code_ == wire.INVALID_REQUEST
    assert message.endswith(f"over the limit of {4 * MiB} bytes for a request")
    assert total == {"total": 3}
    assert outcome.calls == 1
