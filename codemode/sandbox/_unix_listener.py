"""The host's UNIX-socket listener for sandbox channels, with streams that survive cancellation.

Why not ``anyio.create_unix_listener``: on asyncio, anyio (4.16) waits for a UNIX socket with
``loop.add_reader(fd, future.set_result)``. When that wait is cancelled in the same loop turn in
which the socket becomes readable (the sandbox writes or exits just as the host stops waiting),
the already queued callback sets a result on the cancelled future, and the loop reports
``InvalidStateError`` from a bare callback. Nothing is lost, but an embedding application sees an
error it cannot attribute, and anyio's test runner fails the test that happened to be running.

Here connections are accepted with :func:`anyio.wait_readable`, which tolerates that race, and each
is wrapped by :meth:`anyio.abc.SocketStream.from_socket`, which reads through an asyncio transport
instead of raw readiness callbacks (a cancelled receive leaves its bytes buffered for the next).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import anyio
from anyio.abc import SocketStream

__all__ = ["UnixListener"]


class UnixListener:
    """A listening UNIX socket at ``path``; :meth:`accept` returns transport-backed streams."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    @classmethod
    def bind(cls, path: Path, *, mode: int, backlog: int = 16) -> UnixListener:
        """Bind and listen at ``path`` (which must not exist), readable and writable per ``mode``."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            os.chmod(path, mode)
            sock.listen(backlog)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    async def accept_socket(self) -> socket.socket:
        """The next connection as a plain non-blocking socket (the caller owns and closes it)."""
        while True:
            await anyio.wait_readable(self._sock)
            try:
                connection, _ = self._sock.accept()
            except BlockingIOError:  # another waiter took it, or the peer gave up already
                continue
            connection.setblocking(False)
            return connection

    async def accept(self) -> SocketStream:
        connection = await self.accept_socket()
        try:
            return await SocketStream.from_socket(connection)
        except BaseException:
            connection.close()
            raise

    async def aclose(self) -> None:
        with contextlib.suppress(OSError):
            anyio.notify_closing(self._sock)
        self._sock.close()
