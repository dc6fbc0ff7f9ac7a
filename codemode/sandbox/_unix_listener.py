"""The host's UNIX-socket listener for sandbox channels, with an accept that survives cancellation.

Why not ``anyio.create_unix_listener``: on asyncio, anyio (4.16) waits for a UNIX socket with
``loop.add_reader(fd, future.set_result)``. When that wait is cancelled in the same loop turn in
which the socket becomes readable (the sandbox writes or exits just as the host stops waiting),
the already queued callback sets a result on the cancelled future, and the loop reports
``InvalidStateError`` from a bare callback. Nothing is lost, but an embedding application sees an
error it cannot attribute, and anyio's test runner fails the test that happened to be running.

Here connections are accepted with :func:`anyio.wait_readable`, which tolerates that race; the
channel then reads each through an asyncio transport
(:class:`codemode.sandbox._frame_protocol.FrameProtocol`), not through raw readiness callbacks.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import anyio

__all__ = ["UnixListener"]


class UnixListener:
    """A listening UNIX socket at ``path``; :meth:`accept_socket` returns each connection."""

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

    async def aclose(self) -> None:
        with contextlib.suppress(OSError):
            anyio.notify_closing(self._sock)
        self._sock.close()
