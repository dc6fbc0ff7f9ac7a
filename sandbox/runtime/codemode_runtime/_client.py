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
from ._frames import MIN_READ, FrameReader
from ._values import CallFailed
from ._waiter import Waiter

READER_GRACE_S: Final = 0.02
"""How long the socket's read side stays free after a caller has read its own answer, before the
background reader takes it back. A program calling in a loop finds it free and reads its next
answer itself; a program that has stopped calling gets its host requests (``snapshot``, the end
of the channel) answered by the background reader within this time. Between runs nothing waits
for it: see :meth:`Channel.between_runs`."""


class RemoteError(Exception):
    """The host answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


_EMPTY_SNAPSHOT: Final[wire.Snapshot] = {
    "stdout": "",
    "stdout_truncated": False,
    "stderr": "",
    "stderr_truncated": False,
}


def exit_process(channel: Channel) -> NoReturn:
    """What a sandbox does when its channel ends: the host is gone or has finished with it, so
    nothing may outlive it (no program thread, no child process keeping on)."""
    os._exit(0)


class Channel(FrameReader):
    """JSON-RPC over one socket, shared by every thread of the program.

    Writers take one lock per frame. Reading is a role that one thread holds at a time (a
    leader/follower scheme): a thread waiting for its answer takes the read side when it is free
    and reads until its own answer arrives, handing every other frame on as it goes (an answer to
    the thread waiting for it, a ``run`` to the main thread's inbox, a ``snapshot`` answered on
    the spot). Threads that find the read side taken wait to be handed their answer, or the role.
    So the thread that needs an answer is the one the kernel wakes when it arrives: handing each
    answer from a reader thread to the caller cost a second wake-up on every call (0.05-0.1 ms,
    measured against a bare echo). A background thread holds the read side whenever no caller
    has wanted it for :data:`READER_GRACE_S`, so the host is answered while a program computes,
    and at once from :meth:`between_runs` on, since no caller will come before the next ``run``.
    Any number of threads can have stub calls in flight at once.

    The main thread reads more carefully (:meth:`_read_own`): Python runs signal handlers there,
    and a program's handler may raise between any two calls, so it takes only whole frames that
    hold its own answer, and leaves any other frame to the background reader. Other threads read
    through the channel's :class:`FrameReader` buffers, which a reader leaving mid-frame (an
    exception thrown into it) leaves whole for the next one.

    ``on_close`` runs once, in the thread that saw the channel end: :func:`exit_process` in a
    sandbox; the in-process test runtime (``_embedded``) wakes its serve loop instead, since it
    lives in a process it must not end.
    """

    def __init__(self, sock: socket.socket, *, on_close: Callable[[Channel], None] = exit_process) -> None:
        super().__init__(sock)
        self._on_close = on_close
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        """Guards the waiters, the request ids, the read role and the end of the channel."""
        self._role_free = threading.Condition(self._lock)
        self._pending: dict[int, Waiter] = {}
        self._next_id = 1
        self._reader: int | None = None
        """The thread that holds the read role, if one does."""
        self._background: int | None = None
        """The background reader's thread, once :meth:`start` has started it."""
        self._wanted = False
        """The background reader must take the read side as soon as it is free: a thread waiting
        for its answer cannot read the next frame, or no program is running (:meth:`between_runs`)."""
        self._released_at = float("-inf")
        self._closed = False
        self._owner_pid = os.getpid()
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.snapshot: Callable[[], wire.Snapshot] = lambda: _EMPTY_SNAPSHOT

    @property
    def closed(self) -> bool:
        """Whether the channel has ended (the host closed it, or it broke)."""
        return self._closed

    def start(self) -> None:
        reader = threading.Thread(target=self._background_reader, name="codemode-channel", daemon=True)
        reader.start()
        self._background = reader.ident

    def between_runs(self) -> None:
        """Say that no program is running (none has started yet, or the last one has answered):
        no caller will read before the host's next ``run``, so the background reader takes the
        read side now instead of after :data:`READER_GRACE_S`. Otherwise a ``run`` sent within the
        grace of the last answer read by a caller (a warm sandbox's first run right after its
        hello, a session's next run right after a program that called) would wait it out unread.
        """
        with self._lock:
            if self._background is not None and self._reader != self._background:
                self._want_background()  # if a caller reads now, the role goes on when it is done

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
        waiter = Waiter()
        request_id = 0  # no request has it
        try:
            with self._lock:
                if self._closed:
                    raise CallFailed("the channel to the host is closed")
                request_id = self._next_id
                self._next_id += 1
                self._pending[request_id] = waiter
            self.send(wire.request(request_id, method, params))
            self._await(request_id, waiter)
        except BaseException:  # also an exception from a signal handler: nobody waits now
            with self._lock:
                self._pending.pop(request_id, None)
            raise
        if waiter.error is not None:
            raise waiter.error
        return waiter.value

    # -- the read role ---------------------------------------------------------------------

    def _await(self, request_id: int, waiter: Waiter) -> None:
        """Return once ``waiter`` is answered, reading the socket meanwhile if nobody else is."""
        me = threading.get_ident()
        main = me == threading.main_thread().ident
        while True:
            lead = False
            try:
                with self._lock:
                    if waiter.done:
                        return
                    if self._reader == me:
                        # Made from a signal handler or a finalizer that interrupted this thread's
                        # own read: that read cannot go on, nor can another thread take over.
                        raise CallFailed(
                            "a stub call from a signal handler or a finalizer that interrupted a "
                            "stub call's wait is not supported"
                        )
                    if self._reader is None and not self._wanted and not (main and self._mid_frame()):
                        self._reader, lead = me, True  # one statement: no signal handler runs between
                    else:
                        waiter.ready_to_sleep()
                        if self._reader is None and not self._wanted:
                            self._want_background()
                if waiter.waiting:
                    waiter.sleep(self._lock)
                elif main:
                    if not self._read_own(request_id):
                        with self._lock:
                            self._want_background()
                else:
                    while not waiter.done:
                        self._read_frame()
            except (OSError, EOFError, ValueError):
                self._close()
            finally:
                if lead:
                    # Freed here, before any call: a signal handler may raise at the start of one.
                    self._reader = None
                    self._release(waiter)

    def _read_own(self, request_id: int) -> bool:
        """The main thread's read: it takes a frame from the socket only when the whole frame is
        there and is its own answer (peeked first, then received by a call that cannot block).
        Python runs signal handlers in the main thread, and one may raise anywhere, so the main
        thread never holds another thread's answer or part of a frame: an exception costs it at
        most its own answer. Returns False, taking nothing, for any other frame (the background
        reader hands it on)."""
        peeked = self.sock.recv(MIN_READ, socket.MSG_PEEK)
        if not peeked:
            raise EOFError
        if len(peeked) < wire.HEADER.size:
            return False
        end = wire.HEADER.size + wire.HEADER.unpack_from(peeked)[0]
        if len(peeked) < end:
            return False  # not all here yet, or larger than one look
        message = wire.decode_body(peeked[wire.HEADER.size : end])
        if not isinstance(message, dict) or "method" in message or message.get("id") != request_id:
            return False
        self.sock.recv(end)  # what was peeked: exactly ``end`` bytes, already there
        self._response(cast(dict[str, Any], message))
        return True

    def _want_background(self) -> None:
        """Ask the background reader to take the read side now, without its grace (lock held)."""
        self._wanted = True
        self._role_free.notify()

    def _release(self, leaving: Waiter | None = None) -> None:
        """Give up the read role: to the background reader if it is wanted now, else to a thread
        still waiting for its answer (it then reads that answer itself), else to the background
        reader after the grace time. ``leaving``: the releasing thread's own waiter, if it is
        still pending (the thread is leaving with an exception), which must not be handed it."""
        with self._lock:
            self._reader = None  # already None when a caller releases: see _await
            self._released_at = time.monotonic()
            if self._wanted:
                self._role_free.notify()
            else:
                successor = next((w for w in self._pending.values() if w.waiting and w is not leaving), None)
                if successor is not None:
                    successor.wake()

    def _background_reader(self) -> None:
        while True:
            with self._lock:
                while not self._closed and (
                    self._reader is not None
                    or (not self._wanted and time.monotonic() - self._released_at < READER_GRACE_S)
                ):
                    self._role_free.wait(READER_GRACE_S)
                if self._closed:
                    return
                self._reader = threading.get_ident()
                self._wanted = False
            try:
                while not self._read_frame():
                    pass
            except (OSError, EOFError, ValueError):
                self._close()
                return
            finally:
                self._release()

    def _read_frame(self) -> bool:
        """Read and hand on one frame; whether it was an answer."""
        return self._hand_on(self._read_body())

    def _hand_on(self, body: bytes | bytearray) -> bool:
        message = wire.decode_body(body)
        if not isinstance(message, dict):
            return False
        message = cast(dict[str, Any], message)
        if "method" in message:
            self._host_request(message)
            return False
        self._response(message)
        return True

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
                waiter.wake()
            self._role_free.notify_all()
        self._on_close(self)

    def _host_request(self, message: dict[str, Any]) -> None:
        if message.get("method") == wire.SNAPSHOT:
            # Answered by whichever thread reads, so the host can collect partial output from a
            # program that is stuck (for example before killing it at the wall-time limit).
            try:
                snapshot = self.snapshot()
            except Exception:  # not the business of the stub call that happens to be reading
                snapshot = _EMPTY_SNAPSHOT
            self.send(wire.response(message.get("id"), snapshot))
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
            waiter.wake()


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
