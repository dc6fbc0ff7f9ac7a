"""The sandbox end of the run channel: JSON-RPC over one Unix socket, shared by every thread.

The frame format, method names, error codes and message shapes come from ``_wire``, the same
file the host reads (staged here byte for byte).
"""

from __future__ import annotations

import contextvars
import os
import queue
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, cast

from . import _wire as wire
from ._values import CallFailed


class RemoteError(Exception):
    """The host answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Waiter:
    __slots__ = ("error", "event", "value")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


def exit_process(channel: Channel) -> NoReturn:
    """What a sandbox does when its channel ends: the host is gone or has finished with it, so
    nothing may outlive it (no program thread, no child process keeping on)."""
    os._exit(0)


class Channel:
    """JSON-RPC over one socket, shared by every thread of the program.

    Writers take one lock per frame; a single reader thread owns the socket's read side and hands
    each response to the thread waiting for its id, and each host request (``run``) to the main
    thread's inbox. So any number of threads can have stub calls in flight at once.

    ``on_close`` runs in the reader thread once the channel has ended: :func:`exit_process` in a
    sandbox; the in-process test runtime (``_embedded``) wakes its serve loop instead, since it
    lives in a process it must not end.
    """

    def __init__(self, sock: socket.socket, *, on_close: Callable[[Channel], None] = exit_process) -> None:
        self.sock = sock
        self._on_close = on_close
        self._write_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: dict[int, _Waiter] = {}
        self._next_id = 1
        self._closed = False
        self._owner_pid = os.getpid()
        self.max_frame = wire.DEFAULT_MAX_FRAME_BYTES
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.snapshot: Callable[[], wire.Snapshot] = lambda: {
            "stdout": "",
            "stdout_truncated": False,
            "stderr": "",
            "stderr_truncated": False,
        }

    @property
    def closed(self) -> bool:
        """Whether the channel has ended (the host closed it, or it broke)."""
        return self._closed

    def start(self) -> None:
        threading.Thread(target=self._read_loop, name="codemode-channel", daemon=True).start()

    def send(self, message: dict[str, Any]) -> None:
        body = wire.encode_body(message)
        if len(body) > self.max_frame:
            raise ValueError(f"message of {len(body)} bytes exceeds the channel's frame limit")
        with self._write_lock:
            self.sock.sendall(wire.HEADER.pack(len(body)) + body)

    def request(self, method: str, params: Mapping[str, Any]) -> Any:
        if os.getpid() != self._owner_pid:
            # A forked child shares the socket but has no reader thread: it must not talk.
            raise CallFailed("stub calls are not available in a forked child process")
        if self._closed:
            raise CallFailed("the channel to the host is closed")
        waiter = _Waiter()
        with self._pending_lock:
            request_id = self._next_id
            self._next_id += 1
            self._pending[request_id] = waiter
        try:
            self.send(wire.request(request_id, method, params))
        except BaseException:
            with self._pending_lock:
                self._pending.pop(request_id, None)
            raise
        waiter.event.wait()
        if waiter.error is not None:
            raise waiter.error
        return waiter.value

    def _recv_exactly(self, size: int) -> bytes:
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:], size - got)
            if n == 0:
                raise EOFError
            got += n
        return bytes(buffer)

    def _read_loop(self) -> None:
        try:
            while True:
                (length,) = wire.HEADER.unpack(self._recv_exactly(wire.HEADER.size))
                if length > self.max_frame:
                    raise EOFError
                message = wire.decode_body(self._recv_exactly(length))
                if not isinstance(message, dict):
                    continue
                message = cast(dict[str, Any], message)
                if "method" in message:
                    self._host_request(message)
                else:
                    self._response(message)
        except (OSError, EOFError, ValueError):
            pass
        finally:
            self._closed = True
            with self._pending_lock:
                waiters = list(self._pending.values())
                self._pending.clear()
            for waiter in waiters:
                waiter.error = CallFailed("the channel to the host closed", outcome_unknown=True)
                waiter.event.set()
            self._on_close(self)

    def _host_request(self, message: dict[str, Any]) -> None:
        if message.get("method") == wire.SNAPSHOT:
            # Answered from this thread so the host can collect partial output from a program that
            # is stuck (for example before killing it at the wall-time limit).
            self.send(wire.response(message.get("id"), self.snapshot()))
        else:
            self.inbox.put(message)

    def _response(self, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        with self._pending_lock:
            waiter = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if waiter is None:
            return
        error = message.get("error")
        if isinstance(error, dict):
            error = cast(dict[str, Any], error)
            code = error.get("code")
            waiter.error = RemoteError(
                code if isinstance(code, int) else wire.SERVER_ERROR, str(error.get("message", "error"))
            )
        else:
            waiter.value = message.get("result")
        waiter.event.set()


_current: Channel | None = None
"""The sandbox's channel (see :func:`install`)."""
_bound: contextvars.ContextVar[Channel | None] = contextvars.ContextVar("codemode_channel", default=None)
"""A channel bound to the current context only: several in-process test runtimes share one
interpreter, each in its own thread (see :func:`bind`)."""


def connect(directory: str, *, on_close: Callable[[Channel], None] = exit_process) -> Channel:
    """Connect to the host's socket in ``directory`` and authenticate with the one-time secret."""
    with open(os.path.join(directory, wire.SECRET_NAME), encoding="ascii") as handle:
        secret = handle.read().strip()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.path.join(directory, wire.SOCKET_NAME))
    channel = Channel(sock, on_close=on_close)
    channel.start()
    hello: wire.HelloParams = {"secret": secret, "protocol": wire.PROTOCOL_VERSION, "pid": os.getpid()}
    answer = channel.request(wire.HELLO, hello)
    del secret, hello
    if isinstance(answer, dict):
        limit = cast(dict[str, Any], answer).get("max_frame_bytes")
        if isinstance(limit, int):
            channel.max_frame = limit
    return channel


def install(channel: Channel) -> None:
    """Make ``channel`` the one every thread of this process talks through (a real sandbox)."""
    global _current
    _current = channel


def bind(channel: Channel) -> None:
    """Make ``channel`` the one the current context talks through (an in-process test runtime:
    its serve thread, and what it runs with a copy of that context, such as :func:`parallel`)."""
    _bound.set(channel)


def current() -> Channel | None:
    """The connected channel (None before :func:`connect`, for example outside a sandbox)."""
    bound = _bound.get()
    return bound if bound is not None else _current


def request(method: str, params: Mapping[str, Any]) -> Any:
    """Send one request to the host and wait for its answer (raises :class:`RemoteError`)."""
    channel = current()
    if channel is None:
        raise CallFailed("codemode's runtime is not connected to a host")
    return channel.request(method, params)
