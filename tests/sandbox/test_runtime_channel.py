"""The sandbox end of the channel (``codemode_runtime._client.Channel``) against a scripted host.

The host here is a thread on the other end of a socket pair that answers each request as told,
so the tests can order answers, interleave host requests and end the connection at chosen
moments. The read role moves between the threads waiting for answers and the background reader;
whichever holds it, every answer must reach the thread that asked, every ``snapshot`` must be
answered and the end of the channel must free every waiter.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import signal
import socket
import struct
import termios
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from codemode.sandbox._inprocess import load_runtime
from tests.sandbox.conftest import wait_until

HEADER = struct.Struct(">I")


@pytest.fixture
def client(staged: Path) -> types.ModuleType:
    load_runtime(staged)
    return importlib.import_module("codemode_runtime._client")


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return HEADER.pack(len(body)) + body


def read_frame(sock: socket.socket) -> dict[str, Any] | None:
    """The next frame, or None at the end (also when the test has closed the socket)."""
    try:
        header = sock.recv(HEADER.size, socket.MSG_WAITALL)
        if len(header) < HEADER.size:
            return None
        body = sock.recv(HEADER.unpack(header)[0], socket.MSG_WAITALL)
    except OSError:
        return None
    message: dict[str, Any] = json.loads(body)
    return message


class ScriptedHost:
    """The host's end: collects requests, answers them when told (or at once with ``echo``)."""

    def __init__(self, sock: socket.socket, *, echo: bool) -> None:
        self.sock = sock
        self.echo = echo
        self.requests: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (message := read_frame(self.sock)) is not None:
            with self.arrived:
                if "method" in message:
                    self.requests.append(message)
                else:
                    self.answers.append(message)
                self.arrived.notify_all()
            if self.echo and "method" in message:
                self.answer(message, message["params"])

    def wait_for(self, condition: Callable[[], bool]) -> None:
        with self.arrived:
            assert self.arrived.wait_for(condition, timeout=10)

    def answer(self, request: dict[str, Any], result: Any) -> None:
        self.sock.sendall(frame({"jsonrpc": "2.0", "id": request["id"], "result": result}))


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    sandbox_end, host_end = socket.socketpair()
    yield sandbox_end, host_end
    sandbox_end.close()
    host_end.close()


def ignore(_: object) -> None:
    pass


def calls_in_flight(
    pool: ThreadPoolExecutor, channel: Any, host: ScriptedHost, count: int
) -> list[Future[Any]]:
    """``count`` calls from the pool's threads, once the host has all of their requests."""
    futures = [pool.submit(channel.request, "call", {"n": n}) for n in range(count)]
    host.wait_for(lambda: len(host.requests) == count)
    return futures


def open_channel(client: types.ModuleType, sock: socket.socket, closed: list[object] | None = None) -> Any:
    channel = client.Channel(sock, on_close=closed.append if closed is not None else ignore)
    channel.start()
    return channel


def test_answers_reach_the_thread_that_asked_whoever_reads_them(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    """Sixteen threads call at once, then one thread calls in a loop (reading its own answers)."""
    channel = open_channel(client, pair[0])
    ScriptedHost(pair[1], echo=True)

    def call(n: int) -> Any:
        return channel.request("call", {"n": n})

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, range(400)))
    assert answers == [{"n": n} for n in range(400)]
    assert [channel.request("call", {"n": n}) for n in range(200)] == [{"n": n} for n in range(200)]


def test_answers_in_another_order_than_asked_each_reach_their_thread(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    channel = open_channel(client, pair[0])
    host = ScriptedHost(pair[1], echo=False)
    with ThreadPoolExecutor(3) as pool:
        futures = calls_in_flight(pool, channel, host, 3)
        for request in reversed(host.requests):
            host.answer(request, request["params"]["n"] * 10)
        assert sorted(f.result(timeout=10) for f in futures) == [0, 10, 20]


def test_a_snapshot_is_answered_by_the_caller_that_reads(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    channel = client.Channel(pair[0], on_close=ignore)  # not started: callers read
    channel.snapshot = lambda: {
        "stdout": "so far",
        "stdout_truncated": False,
        "stderr": "",
        "stderr_truncated": False,
    }
    host = ScriptedHost(pair[1], echo=False)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(channel.request, "call", {})
        host.wait_for(lambda: len(host.requests) == 1)
        pair[1].sendall(frame({"jsonrpc": "2.0", "id": 7, "method": "snapshot", "params": {}}))
        host.wait_for(lambda: len(host.answers) == 1)
        assert host.answers[0] == {"jsonrpc": "2.0", "id": 7, "result": channel.snapshot()}
        assert not future.done()
        host.answer(host.requests[0], "done")
        assert future.result(timeout=10) == "done"


def test_host_requests_are_read_while_the_program_makes_no_call(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    """After a call, the background reader takes the read side back: a ``run`` reaches the inbox
    and a ``snapshot`` is answered although no thread is waiting for an answer."""
    channel = open_channel(client, pair[0])
    host = ScriptedHost(pair[1], echo=True)
    assert channel.request("call", {"x": 1}) == {"x": 1}
    pair[1].sendall(frame({"jsonrpc": "2.0", "id": 1, "method": "run", "params": {"code": "1"}}))
    assert channel.inbox.get(timeout=10)["method"] == "run"
    pair[1].sendall(frame({"jsonrpc": "2.0", "id": 2, "method": "snapshot", "params": {}}))
    host.wait_for(lambda: len(host.answers) == 1)


def test_the_end_of_the_channel_frees_every_waiter_and_closes_once(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    closed: list[object] = []
    channel = open_channel(client, pair[0], closed)
    host = ScriptedHost(pair[1], echo=False)
    call_failed = client.CallFailed
    with ThreadPoolExecutor(4) as pool:
        futures = calls_in_flight(pool, channel, host, 4)
        pair[1].shutdown(socket.SHUT_RDWR)
        for future in futures:
            with pytest.raises(call_failed, match="closed"):
                future.result(timeout=10)
    deadline = time.monotonic() + 10
    while not closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert closed == [channel]
    assert channel.closed
    with pytest.raises(call_failed, match="closed"):
        channel.request("call", {})


def test_a_frame_split_across_reads_and_two_frames_in_one_read_are_both_understood(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    channel = open_channel(client, pair[0])
    host = ScriptedHost(pair[1], echo=False)
    with ThreadPoolExecutor(2) as pool:
        futures = calls_in_flight(pool, channel, host, 2)
        both = b"".join(
            frame({"jsonrpc": "2.0", "id": r["id"], "result": "x" * 70_000}) for r in host.requests
        )
        for start in range(0, len(both), 9_999):  # the first frame ends inside a piece
            pair[1].sendall(both[start : start + 9_999])
            time.sleep(0.001)
        assert [f.result(timeout=10) for f in futures] == ["x" * 70_000] * 2


class Interrupted(Exception):
    pass


class InterruptedOnSecondRead:
    """The sandbox's end of the socket, except that the second call of ``method`` raises, as a
    program's signal handler can in the thread reading. Reads in place come in pieces of at most
    50,000 bytes, so that a large frame takes several."""

    def __init__(self, sock: socket.socket, method: str) -> None:
        self.sock = sock
        self.method = method
        self.calls: Counter[str] = Counter()

    def _count(self, method: str) -> None:
        self.calls[method] += 1
        if method == self.method and self.calls[method] == 2:
            raise Interrupted

    def recv(self, size: int) -> bytes:
        self._count("recv")
        return self.sock.recv(size)

    def recv_into(self, buffer: memoryview, size: int) -> int:
        self._count("recv_into")
        return self.sock.recv_into(buffer, min(size, 50_000))

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)


def test_a_caller_interrupted_while_reading_leaves_the_stream_whole(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    """A program's signal handler can raise in the thread that holds the read side, mid-frame.
    The bytes it read stay in the channel's buffer, and the next reader carries on from them."""
    channel = client.Channel(pair[0], on_close=ignore)  # not started: callers read
    host = ScriptedHost(pair[1], echo=False)
    channel.sock = InterruptedOnSecondRead(pair[0], "recv")
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(channel.request, "call", {"n": 1})
        host.wait_for(lambda: len(host.requests) == 1)
        answer = frame({"jsonrpc": "2.0", "id": host.requests[0]["id"], "result": "lost"})
        pair[1].sendall(answer[:6])  # the header and two bytes: the caller reads them, then more
        with pytest.raises(Interrupted):
            first.result(timeout=10)
        pair[1].sendall(answer[6:])
        second = pool.submit(channel.request, "call", {"n": 2})
        host.wait_for(lambda: len(host.requests) == 2)
        host.answer(host.requests[1], "whole")
        assert second.result(timeout=10) == "whole"


def test_a_caller_interrupted_while_reading_a_large_frame_in_place_leaves_the_stream_whole(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    """A frame larger than one read goes straight into a buffer of its own size; that buffer
    belongs to the channel too, so a reader interrupted mid-frame loses none of it."""
    channel = client.Channel(pair[0], on_close=ignore)  # not started: callers read
    host = ScriptedHost(pair[1], echo=False)
    channel.sock = sock = InterruptedOnSecondRead(pair[0], "recv_into")
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(channel.request, "call", {"n": 1})
        host.wait_for(lambda: len(host.requests) == 1)
        # Less than the socket buffer holds, so that the host can send it all before anyone reads.
        answer = frame({"jsonrpc": "2.0", "id": host.requests[0]["id"], "result": "y" * 120_000})
        pair[1].sendall(answer[:1000])  # the header and the start: the caller reads on in place
        time.sleep(0.05)
        pair[1].sendall(answer[1000:])
        with pytest.raises(Interrupted):
            first.result(timeout=10)
        second = pool.submit(channel.request, "call", {"n": 2})
        host.wait_for(lambda: len(host.requests) == 2)
        host.answer(host.requests[1], "whole")
        assert second.result(timeout=10) == "whole"
    assert sock.calls["recv_into"] > 2  # the second reader finished the large frame in place


def test_the_main_thread_reads_its_own_answers(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    channel = client.Channel(pair[0], on_close=ignore)  # not started: no other reader
    ScriptedHost(pair[1], echo=True)
    assert threading.current_thread() is threading.main_thread()
    assert [channel.request("call", {"n": n}) for n in range(50)] == [{"n": n} for n in range(50)]


def test_the_main_thread_leaves_other_frames_to_the_background_reader(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    """It waits for its answer; a worker's answer and a snapshot come first: both are handed on."""
    channel = open_channel(client, pair[0])
    host = ScriptedHost(pair[1], echo=False)
    with ThreadPoolExecutor(1) as pool:
        worker = calls_in_flight(pool, channel, host, 1)[0]
        answers: list[Any] = []

        def host_script() -> None:
            host.wait_for(lambda: len(host.requests) == 2)
            time.sleep(client.READER_GRACE_S * 2)
            host.answer(host.requests[0], "for the worker")
            pair[1].sendall(frame({"jsonrpc": "2.0", "id": 9, "method": "snapshot", "params": {}}))
            host.wait_for(lambda: len(host.answers) == 1)
            host.answer(host.requests[1], "for main")

        script = threading.Thread(target=host_script, daemon=True)
        script.start()
        answers.append(channel.request("call", {"n": "main"}))
        assert answers == ["for main"]
        assert worker.result(timeout=10) == "for the worker"
        assert host.answers[0]["id"] == 9
        script.join(10)


@contextlib.contextmanager
def signal_handler(handler: Callable[[int, Any], None]) -> Generator[Callable[[], None]]:
    """``handler`` for SIGUSR1 during the block; yields a function that sends it to the main
    thread (not a timer's SIGALRM: pytest-timeout uses that one)."""
    previous = signal.signal(signal.SIGUSR1, handler)
    main = threading.main_thread().ident
    assert main is not None
    try:
        yield lambda: signal.pthread_kill(main, signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.timeout(60)
def test_a_signal_handler_raising_in_the_main_thread_loses_no_other_threads_answer(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    """A program's signal handler raises in the main thread every half millisecond while it and
    four workers call: the main thread's calls may end in the handler's exception, but every
    worker's call is answered and the channel stays open."""
    channel = open_channel(client, pair[0])
    ScriptedHost(pair[1], echo=True)

    class Tick(Exception):
        pass

    def tick(signum: int, frame: Any) -> None:
        raise Tick

    def calls(worker: int) -> list[Any]:
        return [channel.request("call", {"w": worker, "n": n}) for n in range(300)]

    interrupted = 0
    done = threading.Event()
    with signal_handler(tick) as send_signal, ThreadPoolExecutor(5) as pool:

        def keep_signalling() -> None:
            while not done.wait(0.0005):
                send_signal()

        workers = [pool.submit(calls, w) for w in range(4)]
        signaller = pool.submit(keep_signalling)
        try:
            for n in range(300):
                try:
                    assert channel.request("call", {"n": n}) == {"n": n}
                except Tick:
                    interrupted += 1
        finally:
            done.set()
            while not signaller.done():
                with contextlib.suppress(Tick):
                    time.sleep(0.001)
            with contextlib.suppress(Tick):
                time.sleep(0.01)  # a signal sent last is handled here, not in the checks below
        for w, future in enumerate(workers):
            assert future.result(timeout=30) == [{"w": w, "n": n} for n in range(300)]
    assert interrupted > 0, "the handler never interrupted a call: the test tested nothing"
    assert not channel.closed


@pytest.mark.timeout(60)
def test_a_stub_call_from_a_signal_handler_during_the_main_threads_read_fails_clearly(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    channel = client.Channel(pair[0], on_close=ignore)  # not started: the main thread reads
    host = ScriptedHost(pair[1], echo=False)
    seen: list[BaseException] = []

    def call_from_handler(signum: int, frame: Any) -> None:
        try:
            channel.request("nested", {})
        except client.CallFailed as exc:
            seen.append(exc)

    with signal_handler(call_from_handler) as send_signal:
        threading.Timer(0.05, send_signal).start()
        threading.Timer(0.3, lambda: host.answer(host.requests[0], "late")).start()
        assert channel.request("call", {}) == "late"
    assert len(seen) == 1 and "from a signal handler" in str(seen[0]), seen


# -- between runs: no caller will read, so nothing waits for the background reader's grace --------

FOREVER_S = 3600.0
"""The background reader's grace in the tests below: a frame that waited for its timer would not
be read within any test's time, so they fail on such a wait however fast or slow the machine."""
NO_LONG_HANG = pytest.mark.timeout(60)
"""A thread left waiting for the grace keeps a test's thread pool from closing: fail sooner."""


def run_request(request_id: int) -> bytes:
    return frame({"jsonrpc": "2.0", "id": request_id, "method": "run", "params": {"code": "1"}})


def unread_bytes(sock: socket.socket) -> int:
    """Bytes that have arrived at ``sock`` and that no thread has received yet."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


@NO_LONG_HANG
def test_between_runs_a_run_right_after_the_last_answer_is_read_at_once(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm sandbox's first run comes right after its hello, a session's next run right after
    the last call of the run before: both right after a caller read its answer and freed the
    read side. Between runs no caller comes, so the background reader takes it at once."""
    monkeypatch.setattr(client, "READER_GRACE_S", FOREVER_S)
    channel = open_channel(client, pair[0])
    host = ScriptedHost(pair[1], echo=True)
    for n in range(1, 4):  # a hello, then each run's last call: the read side is left free
        assert channel.request("call", {"n": n}) == {"n": n}
        channel.between_runs()
        pair[1].sendall(run_request(n))
        assert channel.inbox.get(timeout=10)["id"] == n
    pair[1].sendall(frame({"jsonrpc": "2.0", "id": 99, "method": "snapshot", "params": {}}))
    host.wait_for(lambda: any(answer["id"] == 99 for answer in host.answers))


@NO_LONG_HANG
def test_between_runs_the_read_side_goes_to_the_background_reader_when_a_reading_caller_is_done(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread the program left running is reading for its own answer when the run ends: once
    it has that answer, the read side goes to the background reader, not back to the grace."""
    monkeypatch.setattr(client, "READER_GRACE_S", FOREVER_S)
    channel = open_channel(client, pair[0])
    host = ScriptedHost(pair[1], echo=False)
    with ThreadPoolExecutor(1) as pool:
        first = calls_in_flight(pool, channel, host, 1)[0]
        host.answer(host.requests[0], "first")
        assert first.result(timeout=10) == "first"  # the read side is free now, for an hour
        worker = pool.submit(channel.request, "call", {"n": 2})
        host.wait_for(lambda: len(host.requests) == 2)
        answer = frame({"jsonrpc": "2.0", "id": host.requests[1]["id"], "result": "second"})
        pair[1].sendall(answer[:6])
        wait_until(lambda: unread_bytes(pair[0]) == 0, what="the worker to read the answer's start")
        channel.between_runs()
        pair[1].sendall(answer[6:])
        assert worker.result(timeout=10) == "second"
        pair[1].sendall(run_request(3))
        assert channel.inbox.get(timeout=10)["id"] == 3


@NO_LONG_HANG
def test_between_runs_leaves_reading_to_the_callers_of_a_channel_without_a_background_reader(
    client: types.ModuleType, pair: tuple[socket.socket, socket.socket]
) -> None:
    channel = client.Channel(pair[0], on_close=ignore)  # not started: callers read
    ScriptedHost(pair[1], echo=True)
    channel.between_runs()
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(channel.request, "call", {"n": 1}).result(timeout=10) == {"n": 1}
    assert channel.request("call", {"n": 2}) == {"n": 2}
