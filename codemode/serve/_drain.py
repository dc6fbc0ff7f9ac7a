"""Stopping ``codemode serve`` over HTTP gracefully: the drain.

At ``stop`` (SIGTERM, SIGHUP, Ctrl-C: see :func:`codemode.cli._signals.run_draining`) the
replica tells ``/readyz`` it is draining, turns new runs away, waits for the runs in flight and
then for their answers to be sent, and only then closes.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from codemode.serve._health import Readiness

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger("codemode.serve")

ANSWER_READ_S = 1.0
"""Once the last answer of a drain is sent, how long its client has to read it before serve closes."""


class InFlight:
    """How many of something are under way (:meth:`counted`), and a wait until none is."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = anyio.Event()

    @contextlib.contextmanager
    def counted(self) -> Generator[None]:
        self.count += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        try:
            yield
        finally:
            self.count -= 1
            if self.count == 0:
                self._idle.set()

    async def wait_idle(self) -> None:
        if self.count:
            await self._idle.wait()


class RunsToDrain(Protocol):
    async def drain(self, within_s: float) -> int:
        """Turn new runs away, wait up to ``within_s`` for those in flight; how many are left."""
        ...


class RequestsInFlight:
    """ASGI middleware: counts the POST requests whose response has not been sent in full. A run
    that has finished may still be on its way to the client; the drain waits for that too, or
    closing would cut the answer off. (A GET's event stream never ends: it is not counted.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.in_flight = InFlight()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        with self.in_flight.counted():
            await self.app(scope, receive, send)  # returns once the whole response is sent


@dataclass(frozen=True)
class Drain:
    """What stopping gracefully takes: the signal to begin, the probe to tell, the runs and the
    answers to wait for."""

    stop: anyio.Event
    readiness: Readiness
    server: RunsToDrain
    requests: RequestsInFlight
    within_s: float


async def serve_until_stopped(uv: uvicorn.Server, sock: socket.socket, drain: Drain) -> None:
    """Run uvicorn until ``drain.stop`` is set or the caller cancels, and end it gracefully.

    At ``stop`` the replica drains: ``/readyz`` turns 503 so a load balancer stops sending work,
    new runs are turned away with a word to retry, and the runs in flight get ``drain.within_s``
    to finish. Only then does uvicorn close: cancelling its tasks directly tears down the ASGI
    lifespan with a traceback; setting ``should_exit`` closes the listener, lets open requests
    finish (for up to the grace period: a streaming response never does) and runs the lifespan
    shutdown. Cancelled from outside (no drain asked), it closes that way at once.
    """
    finished = anyio.Event()

    async def run() -> None:
        try:
            with anyio.CancelScope(shield=True):
                await uv.serve(sockets=[sock])
        finally:
            finished.set()

    async def drain_at_stop() -> None:
        await drain.stop.wait()
        drain.readiness.draining = True
        deadline = anyio.current_time() + drain.within_s
        left = await drain.server.drain(drain.within_s)
        if left:
            log.warning("%d run(s) still running after drain_s = %g s: cancelling them", left, drain.within_s)
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            await drain.requests.in_flight.wait_idle()
            # Closing also ends the clients' event streams, and a client that loses its stream
            # before it has read the answer it was just sent may give that answer up.
            await anyio.sleep(ANSWER_READ_S)
        uv.should_exit = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        tg.start_soon(drain_at_stop)
        try:
            await finished.wait()
        finally:
            drain.readiness.draining = True
            uv.should_exit = True
            with anyio.CancelScope(shield=True):
                await finished.wait()
        tg.cancel_scope.cancel()
