"""The channel's listener: a receive cancelled just as the sandbox writes loses nothing, raises nothing.

anyio's own UNIX streams report ``InvalidStateError`` from a loop callback in exactly this race
(see :mod:`codemode.sandbox._unix_listener`); anyio's test runner turns such a callback error into
a failure of the test, so each test here fails if the race comes back.
"""

from __future__ import annotations

import asyncio
import socket
import stat
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketStream

from codemode.sandbox._unix_listener import UnixListener

pytestmark = pytest.mark.anyio


async def _connected(path: Path) -> tuple[UnixListener, socket.socket]:
    listener = UnixListener.bind(path, mode=0o600)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))
    return listener, client


async def test_a_receive_cancelled_in_the_turn_its_bytes_arrive_keeps_them(tmp_path: Path) -> None:
    listener, client = await _connected(tmp_path / "s")
    stream = await SocketStream.from_socket(await listener.accept_socket())
    outcome: list[str] = []

    async def receive() -> None:
        try:
            await stream.receive()
            outcome.append("received")
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    task = asyncio.ensure_future(receive())
    await anyio.sleep(0.05)  # the receive now waits on the socket
    client.sendall(b"first")
    # Cancel in the next loop turn: the same turn in which the loop sees the socket readable.
    asyncio.get_running_loop().call_soon(task.cancel)
    with pytest.raises(asyncio.CancelledError):
        await task
    await anyio.sleep(0.05)  # let any stray readiness callback run (and fail the test) now
    assert outcome == ["cancelled"]
    with anyio.fail_after(5):
        assert await stream.receive() == b"first", "the bytes that arrived meanwhile are not lost"
    await stream.aclose()
    await listener.aclose()
    client.close()


async def test_an_accept_cancelled_as_a_client_connects_raises_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s"
    listener = UnixListener.bind(path, mode=0o600)
    task = asyncio.ensure_future(listener.accept_socket())
    await anyio.sleep(0.05)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))
    asyncio.get_running_loop().call_soon(task.cancel)
    with pytest.raises(asyncio.CancelledError):
        await task
    await anyio.sleep(0.05)
    with anyio.fail_after(5):
        connection = await listener.accept_socket()  # the connection still waits in the backlog
    connection.sendall(b"hi")
    assert client.recv(2) == b"hi"
    connection.close()
    await listener.aclose()
    client.close()


def test_the_socket_gets_the_asked_mode_and_an_existing_path_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    listener = UnixListener.bind(path, mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(OSError, match="in use"):
        UnixListener.bind(path, mode=0o600)
    anyio.run(listener.aclose)
