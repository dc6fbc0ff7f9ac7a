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
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn, cast

from . import _wire as wire
from ._values import CallFailed

READER_GRACE_S: Final = 0.02
"""How long the socket's read side stays free after a caller has read its own answer, before the
background reader takes it back. A program calling in a loop finds it free and reads its next
answer itself; a program that has stopped calling gets its host requests (``snapshot``, the end
of the channel) answered by the background reader within this time."""
_MIN_READ: Final = 64 * 1024
_MAX_READ: Final = 1024 * 1024
"""Bounds of one ``recv``: small frames come in one read, a large one in pieces of at most this."""


class RemoteError(Exception):
    """The host answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Waiter:
    __slots__ = ("done", "error", "event", "value")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None


def exit_process(channel: Channel) -> NoReturn:
    """What a sandbox does when its channel ends: the host is gone or has finished with it, so
    nothing may outlive it (no program thread, no child process keeping on)."""
    os._exit(0)


class Channel:
    """JSON-RPC over one socket, shared by every thread of the program.

    Writers take one lock per frame. Reading is a role that one thread holds at a time (a
    leader/follower scheme): a thread waiting for its answer takes the read side when it is free
    and reads until its own answer arrives, handing every other frame on as it goes (an answer to
    the thread waiting for it, a ``run`` to the main thread's inbox, a ``snapshot`` answered on
    the spot). Threads that find the read side taken wait to be handed their answer, or the role.
    So the thread that needs an answer is the one the kernel wakes when it arrives: handing each
    answer from a reader thread to the caller cost a second wake-up on every call (0.05-0.1 ms,
    measured against a bare echo). A background thread holds the read side whenever no caller
    has wanted it for :data:`READER_GRACE_S`, so the host is answered while a program computes.
    Any number of threads can have stub calls in flight at once.

    Frames are read through one buffer owned by the channel, not by the thread reading, so a
    reader that leaves mid-frame (an exception from a signal handler the program installed)
    leaves what it read for the next one.

    ``on_close`` runs once, in the thread that saw the channel end: :func:`exit_process` in a
    sandbox; the in-process test runtime (``_embedded``) wakes its serve loop instead, since it
    lives in a process it must not end.
    """

    def __init__(self, sock: socket.socket, *, on_close: Callable[[Channel], None] = exit_process) -> None:
        self.sock = sock
        self._on_close = on_close
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        """Guards the waiters, the request ids, the read role and the end of the channel."""
        self._role_free = threading.Condition(self._lock)
        self._pending: dict[int, _Waiter] = {}
        self._next_id = 1
        self._reading = False
        self._released_at = float("-inf")
        self._closed = False
        self._buffer = bytearray()
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
        threading.Thread(target=self._background_reader, name="codemode-channel", daemon=True).start()

    def send(self, message: dict[str, Any]) -> None:
        body = wire.encode_body(message)
        if len(body) > self.max_frame:
            raise ValueError(f"message of {len(body)} bytes exceeds the channel's frame limit")
        with self._write_lock:
            self.sock.sendall(wire.HEADER.pack(len(body)) + body)

    def request(self, method: str, params: Mapping[str, Any]) -> Any:
        if os.getpid() != self._owner_pid:
            # A forked child shares the socket but not the threads that read it: it must not talk.
            raise CallFailed("stub calls are not available in a forked child process")
        waiter = _Waiter()
        with self._lock:
            if self._closed:
                raise CallFailed("the channel to the host is closed")
            request_id = self._next_id
            self._next_id += 1
            self._pending[request_id] = waiter
        try:
            self.send(wire.request(request_id, method, params))
        except BaseException:
            with self._lock:
                self._pending.pop(request_id, None)
            raise
        try:
            self._await(waiter)
        except BaseException:  # interrupted (a signal handler of the program): nobody waits now
            with self._lock:
                self._pending.pop(request_id, None)
            raise
        if waiter.error is not None:
            raise waiter.error
        return waiter.value

    # -- the read role ---------------------------------------------------------------------

    def _await(self, waiter: _Waiter) -> None:
        """Return once ``waiter`` is answered, reading the socket meanwhile if nobody else is."""
        while True:
            with self._lock:
                if waiter.done:
                    return
                lead = not self._reading
                if lead:
                    self._reading = True
                else:
                    waiter.event.clear()  # set again on its answer, or when handed the read role
            if not lead:
                waiter.event.wait()
                continue
            try:
                while not waiter.done:
                    self._read_frame()
            except (OSError, EOFError, ValueError):
                self._close()
            finally:
                self._release()

    def _release(self) -> None:
        """Give up the read role: to a thread still waiting for its answer if there is one (it
        then reads that answer itself), else to the background reader after the grace time."""
        with self._lock:
            self._reading = False
            self._released_at = time.monotonic()
            successor = next((w for w in self._pending.values() if not w.done), None)
        if successor is not None:
            successor.event.set()

    def _background_reader(self) -> None:
        while True:
            with self._lock:
                while not self._closed and (
                    self._reading or time.monotonic() - self._released_at < READER_GRACE_S
                ):
                    self._role_free.wait(READER_GRACE_S)
                if self._closed:
                    return
                self._reading = True
            try:
                while self._read_frame() != "answer":
                    pass
            except (OSError, EOFError, ValueError):
                self._close()
                return
            finally:
                self._release()

    def _read_frame(self) -> str:
        """Read and hand on one frame; say what it was (``answer``, ``request`` or ``other``)."""
        buffer = self._fill(wire.HEADER.size)
        (length,) = wire.HEADER.unpack_from(buffer)
        if length > self.max_frame:
            raise EOFError
        end = wire.HEADER.size + length
        buffer = self._fill(end)
        message = wire.decode_body(bytes(memoryview(buffer)[wire.HEADER.size : end]))
        del buffer[:end]
        if not isinstance(message, dict):
            return "other"
        message = cast(dict[str, Any], message)
        if "method" in message:
            self._host_request(message)
            return "request"
        self._response(message)
        return "answer"

    def _fill(self, size: int) -> bytearray:
        """The read buffer, once it holds at least ``size`` bytes (it may hold more: the start of
        the next frame, left there for whoever reads next)."""
        buffer = self._buffer
        while len(buffer) < size:
            chunk = self.sock.recv(min(max(size - len(buffer), _MIN_READ), _MAX_READ))
            if not chunk:
                raise EOFError
            buffer += chunk
        return buffer

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            waiters = list(self._pending.values())
            self._pending.clear()
            for waiter in waiters:
                waiter.error = CallFailed("the channel to the host closed", outcome_unknown=True)
                waiter.done = True
            self._role_free.notify_all()
        for waiter in waiters:
            waiter.event.set()
        self._on_close(self)

    def _host_request(self, message: dict[str, Any]) -> None:
        if message.get("method") == wire.SNAPSHOT:
            # Answered by whichever thread reads, so the host can collect partial output from a
            # program that is stuck (for example before killing it at the wall-time limit).
            self.send(wire.response(message.get("id"), self.snapshot()))
        else:
            self.inbox.put(message)

    def _response(self, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        error = message.get("error")
        with self._lock:
            waiter = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
            if waiter is None:
                return
            if isinstance(error, dict):
                error = cast(dict[str, Any], error)
                code = error.get("code")
                waiter.error = RemoteError(
                    code if isinstance(code, int) else wire.SERVER_ERROR, str(error.get("message", "error"))
                )
            else:
                waiter.value = message.get("result")
            waiter.done = True
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
