"""Pieces of the channel tests that talk to a real HostChannel over its socket: a handler that
holds calls until released, an empty module tree, frames, and the peer's side of the hello."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any

import anyio

from codemode.calls import CallOutcome, RunBinding, ToolCallRequest, ToolResult
from codemode.sandbox._channel import SECRET_NAME, SOCKET_NAME, HostChannel


class BlockingHandler:
    """Holds every call until ``gate`` is set; counts what ran at once and each call's size."""

    def __init__(self) -> None:
        self.started = 0
        self.running = 0
        self.peak = 0
        self.sizes: list[int] = []
        self.gate = anyio.Event()

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        self.started += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.sizes.append(len(json.dumps(request.arguments)))
        await self.gate.wait()
        await anyio.sleep(0.01)  # the next calls are read while these still run
        self.running -= 1
        return ToolResult(structured={"seq": request.seq})

    async def read_resource(self, binding: RunBinding, request: Any) -> CallOutcome:
        raise NotImplementedError

    async def get_prompt(self, binding: RunBinding, request: Any) -> CallOutcome:
        raise NotImplementedError


class NoModules:
    def module_source(self, module: str) -> None:
        return None


def read_frame(sock: socket.socket) -> Any:
    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    (length,) = struct.unpack(">I", exactly(4))
    return json.loads(exactly(length))


def frame(message: Any) -> bytes:
    """``message`` (JSON, or a body already encoded) as one length-prefixed frame."""
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


async def hello(channel: HostChannel, folder: Path, *, then: bytes = b"") -> socket.socket:
    """Listen on ``channel`` (its folder is ``folder``), connect as a sandbox would, say hello
    (``then``: frames sent right behind it) and read the host's answer; returns the socket."""
    await channel.listen()
    secret = (folder / SECRET_NAME).read_text()
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(str(folder / SOCKET_NAME))
    greeting = {"jsonrpc": "2.0", "id": 1, "method": "hello", "params": {"secret": secret, "protocol": 1}}
    sock.sendall(frame(greeting) + then)
    await channel.accept(10)
    assert (await anyio.to_thread.run_sync(read_frame, sock))["id"] == 1
    return sock
