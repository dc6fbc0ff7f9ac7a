"""The run channel refuses hostile input and the host is unharmed (no crash, no memory growth)."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from codemode.calls import CallFailed, ToolResult
from codemode.errors import ChannelError, SandboxError
from codemode.sandbox import Program, SandboxManager
from codemode.sandbox._channel import SECRET_NAME, SOCKET_NAME, HostChannel
from codemode.sandbox._channel_messages import response_frame
from codemode.sandbox._framing import MalformedMessage, decode, encode, json_depth

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


# -- framing -------------------------------------------------------------------------------------


def test_json_depth_counts_nesting_without_recursion() -> None:
    assert json_depth(1) == 0
    assert json_depth([]) == 1
    assert json_depth({"a": [1, {"b": []}]}) == 4
    deep: Any = []
    for _ in range(10_000):
        deep = [deep]
    assert json_depth(deep) == 10_001


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"\xff\xfe", "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (b"[NaN]", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"[" * 65 + b"]" * 65, "deeper than 64"),
    ],
)
def test_decode_refuses_malformed_bodies(body: bytes, problem: str) -> None:
    with pytest.raises(MalformedMessage, match=problem):
        decode(body)


def test_decode_counts_levels_not_brackets_in_strings() -> None:
    """Brackets inside strings make a body worth walking, but only real nesting is refused."""
    shallow = json.dumps({"text": "[" * 200, "items": [[1], {"k": "{" * 100}]}).encode()
    assert decode(shallow)["items"] == [[1], {"k": "{" * 100}]
    exactly_64 = b"[" * 64 + b"]" * 64
    assert json_depth(decode(exactly_64)) == 64
    hidden = json.dumps({"pad": "]" * 100, "deep": json.loads(b"[" * 64 + b"]" * 64)}).encode()
    with pytest.raises(MalformedMessage, match="deeper than 64"):
        decode(hidden)


def test_encode_writes_a_length_prefix() -> None:
    frame = encode({"a": 1})
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    assert json.loads(frame[4:]) == {"a": 1}


# -- before authentication: connections to a channel's socket -----------------------------------


def _frame(message: Any) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def _hello(secret: str) -> bytes:
    return _frame({"jsonrpc": "2.0", "id": 1, "method": "hello", "params": {"secret": secret, "protocol": 1}})


def _attack(path: Path, payload: bytes | Callable[[socket.socket], None]) -> bytes:
    """Connect, send ``payload``, return what the host answered before closing (b'' = nothing)."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(str(path))
    try:
        if callable(payload):
            payload(sock)
        else:
            sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the host hung up on us mid-send: refused
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except OSError:
        pass
    sock.close()
    return received


def _hundred_megabytes(sock: socket.socket) -> None:
    sock.sendall(struct.pack(">I", 100 * MiB))
    chunk = b"\0" * MiB
    for _ in range(100):
        sock.sendall(chunk)


async def test_hostile_connections_are_refused_and_the_real_runtime_still_gets_in(tmp_path: Path) -> None:
    channel = HostChannel(tmp_path / "ch", max_frame_bytes=16 * MiB)
    await channel.listen()
    secret = (tmp_path / "ch" / SECRET_NAME).read_text()
    path = tmp_path / "ch" / SOCKET_NAME
    attacks: dict[str, bytes | Callable[[socket.socket], None]] = {
        "garbage": b"\x13\x37garbage bytes that are not a frame" * 10,
        "100 MB frame": _hundred_megabytes,
        "deep nesting": struct.pack(">I", 200_000) + b"[" * 100_000 + b"]" * 100_000,
        "wrong secret": _hello("not-the-secret"),
        "not hello first": _frame({"jsonrpc": "2.0", "id": 1, "method": "call", "params": {}}),
    }
    host = psutil.Process()
    before = host.memory_info().rss
    answers: dict[str, bytes] = {}
    genuine = socket.socket(socket.AF_UNIX)
    async with anyio.create_task_group() as tg:
        tg.start_soon(channel.accept, 30.0)
        for name, payload in attacks.items():
            answers[name] = await anyio.to_thread.run_sync(_attack, path, payload)
        # After all that, the genuine runtime authenticates and gets the hello answer.
        genuine.connect(str(path))
        genuine.sendall(_hello(secret))
        header = await anyio.to_thread.run_sync(genuine.recv, 4)
        assert len(header) == 4
    assert answers == dict.fromkeys(attacks, b""), "hostile connections got answers"
    assert host.memory_info().rss - before < 50 * MiB
    # The rendezvous is gone: the socket path and the secret file were removed after the hello.
    assert not path.exists()
    assert not (tmp_path / "ch" / SECRET_NAME).exists()
    genuine.close()
    await channel.aclose()


async def test_a_channel_nobody_authenticates_gives_up_at_its_deadline(tmp_path: Path) -> None:
    channel = HostChannel(tmp_path / "ch", max_frame_bytes=16 * MiB)
    await channel.listen()
    path = tmp_path / "ch" / SOCKET_NAME
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, _attack, path, _hello("wrong"))
        with pytest.raises(SandboxError, match="did not connect within 1 s"):
            await channel.accept(1.0)


# -- after authentication: a program abusing its own connection ---------------------------------

_RAW = (
    "import codemode_runtime._client, struct\n"
    "sock = codemode_runtime._client.current().sock\n"
    "def send(body):\n"
    "    sock.sendall(struct.pack('>I', len(body)) + body)\n"
)

HOSTILE_PROGRAMS = {
    "garbage bytes": _RAW + "sock.sendall(b'\\xde\\xad\\xbe\\xef' * 1000)\nimport time\ntime.sleep(30)\n",
    "a 100 MB frame": _RAW
    + "sock.sendall(struct.pack('>I', 100 << 20))\n"
    + "chunk = b'\\0' * (1 << 20)\n"
    + "for _ in range(100):\n    sock.sendall(chunk)\n"
    + "import time\ntime.sleep(30)\n",
    "100,000-deep nesting": _RAW + "send(b'[' * 100000 + b']' * 100000)\nimport time\ntime.sleep(30)\n",
    "not JSON-RPC": _RAW + "send(b'{\"hello\": 1}')\nimport time\ntime.sleep(30)\n",
}


@pytest.mark.integration
@pytest.mark.parametrize("attack", list(HOSTILE_PROGRAMS))
async def test_a_program_breaking_the_protocol_gets_a_channel_error_and_the_host_carries_on(
    attack: str,
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    host = psutil.Process()
    before = host.memory_info().rss
    async with SandboxManager(make_config()) as manager:
        outcome = await manager.run(
            Program(HOSTILE_PROGRAMS[attack]), binding=new_binding(), modules=stub_tree, handler=handler
        )
        assert outcome.status == "error"
        assert outcome.error is not None
        assert outcome.error.kind == "channel", outcome.error
        assert outcome.duration_ms < 15_000
        healthy = await manager.run(
            Program("sum(range(10))"), binding=new_binding(), modules=stub_tree, handler=handler
        )
        assert (healthy.status, healthy.result) == ("ok", 45)
    assert host.memory_info().rss - before < 50 * MiB
    no_leftovers()


@pytest.mark.integration
async def test_a_second_connection_with_a_wrong_secret_finds_no_socket(
    run_program: Callable[..., Any], no_leftovers: Callable[[], None]
) -> None:
    code = (
        "import os, socket, json, struct\n"
        "env = open('/proc/self/environ', 'rb').read().decode().split('\\0')\n"
        "dirs = [e.split('=', 1)[1] for e in env if e.startswith('CODEMODE_CHANNEL_DIR=')]\n"
        "dirs = dirs or ['/run/codemode']\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "body = json.dumps({'jsonrpc': '2.0', 'id': 1, 'method': 'hello',"
        " 'params': {'secret': 'guess', 'protocol': 1}}).encode()\n"
        "try:\n"
        "    s.connect(os.path.join(dirs[0], 'channel.sock'))\n"
        "    s.sendall(struct.pack('>I', len(body)) + body)\n"
        "    result = s.recv(100) or 'closed'\n"
        "except OSError as exc:\n"
        "    result = type(exc).__name__\n"
        "result\n"
    )
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result in ("FileNotFoundError", "ConnectionRefusedError", "PermissionError", "closed")
    no_leftovers()


@pytest.mark.integration
async def test_malformed_requests_are_answered_with_errors_without_closing_the_channel(
    run_program: Callable[..., Any], handler: Any
) -> None:
    code = (
        "import codemode_runtime as rt\n"
        "answers = []\n"
        "add = {'server': 'demo', 'tool': 'add', 'schema_hash': 'h'}\n"
        "for method, params in [('call', {**add, 'arguments': [1]}),\n"
        "                       ('call', {**add, 'tenant': 'evil'}),\n"
        "                       ('shell', {}), ('hello', {'secret': 'x', 'protocol': 1}),\n"
        "                       ('import', {'module': 'os'})]:\n"
        "    try:\n"
        "        answers.append(rt._request(method, params))\n"
        "    except rt._RemoteError as exc:\n"
        "        answers.append(exc.code)\n"
        "answers.append(rt.call_tool('demo', 'add', 'h', {'a': 1, 'b': 2}))\n"
        "answers\n"
    )
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == [-32602, -32602, -32601, -32600, {"found": False}, {"total": 3}]
    assert outcome.calls == 1
    # The binding comes from the host, whatever the sandbox sends.
    assert [b.tenant for b in handler.bindings] == ["acme"]


@pytest.mark.integration
async def test_a_call_to_a_tool_not_in_the_tree_is_refused(run_program: Callable[..., Any]) -> None:
    code = (
        "import codemode\n"
        "try:\n"
        "    codemode.call_tool('demo', 'drop_database', 'sha256:x', {})\n"
        "    result = 'called'\n"
        "except codemode.CallDenied as exc:\n"
        "    result = [exc.gate, exc.reason]\n"
        "try:\n"
        "    import servers.demo.drop_database\n"
        "except ModuleNotFoundError as exc:\n"
        "    result.append(type(exc).__name__)\n"
        "result\n"
    )
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == ["tool", "demo/drop_database is not in the tree", "ModuleNotFoundError"]


def test_channel_errors_are_codemode_errors() -> None:
    assert issubclass(MalformedMessage, ChannelError)


def test_an_outcome_reply_frame_is_the_outcome_as_plain_json() -> None:
    outcome = ToolResult(
        structured={"name": "Zoë\u2028", "big": 10**30, "ratio": 0.1, "missing": float("nan")}
    )
    frame = response_frame(7, outcome)
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    message = decode(frame[4:])  # the host's own strict decoder: no NaN, plain JSON
    expected = json.loads(json.dumps(outcome.model_dump(mode="json")).replace("NaN", "null"))
    assert message == {"jsonrpc": "2.0", "id": 7, "result": expected}
    failed = decode(response_frame("a", CallFailed(reason="no"))[4:])
    assert failed == {
        "jsonrpc": "2.0",
        "id": "a",
        "result": {"kind": "failed", "reason": "no", "outcome_unknown": False},
    }
    assert decode(response_frame(3, {"found": False})[4:]) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"found": False},
    }
