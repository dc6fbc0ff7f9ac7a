"""The warm pool: sandboxes started ahead of time, connected and authenticated, waiting for a run.

A run takes one (or starts one cold when none is ready); a sandbox is never returned to the pool,
so nothing of one run is visible to the next. A refill task keeps ``size`` sandboxes ready and
backs off when starting fails (a run that finds the pool empty starts a sandbox itself and so
reports the error).

Starting a sandbox costs CPU (an interpreter start; for Docker, runc and the engine), and on a
small machine that competes with the run that just took one. So the refill for a taken sandbox
starts when that run finishes (:meth:`WarmPool.release`) or after ``REFILL_DELAY_S``, whichever
comes first: short runs stay fast, long ones do not leave the pool empty. A sandbox taken to be
*held* (a batch worker's session, busy for the whole job) is replaced only when it is released:
a replacement started at once would sit unused while competing with the job for the CPU.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable

import anyio

from codemode.errors import CodemodeError
from codemode.sandbox._live import LiveSandbox

__all__ = ["WarmPool"]

log = logging.getLogger("codemode.sandbox.pool")

REFILL_DELAY_S = 1.0
MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


class WarmPool:
    def __init__(
        self,
        start: Callable[[], Awaitable[LiveSandbox]],
        size: int,
        discard: Callable[[LiveSandbox], None],
    ) -> None:
        self._start = start
        self._size = size
        self._discard = discard
        self._ready: deque[LiveSandbox] = deque()
        self._starting = 0
        self._wanted = anyio.Event()
        self._backoff = MIN_BACKOFF_S
        self._retry_at = 0.0
        self._arrived = anyio.Event()
        """Set (and replaced) each time a start ends, ready or failed."""
        self._awaited = 0
        """Takers waiting for a sandbox being started (see :meth:`take_soon`)."""
        self._claims: dict[int, float] = {}
        """Sandboxes taken and still running: id(sandbox) -> when their refill starts anyway."""
        self.last_error: str | None = None

    @property
    def size(self) -> int:
        return self._size

    @property
    def ready(self) -> int:
        return sum(1 for sandbox in self._ready if sandbox.usable)

    def take(self, *, hold: bool = False) -> LiveSandbox | None:
        """A ready sandbox, or None when none is ready. Call :meth:`release` when its run ends
        (with ``hold``, its place is refilled only then)."""
        while self._ready:
            sandbox = self._ready.popleft()
            if sandbox.usable:
                self._claims[id(sandbox)] = math.inf if hold else time.monotonic() + REFILL_DELAY_S
                self._wanted.set()
                return sandbox
            self._discard(sandbox)
        return None

    async def take_soon(self, *, hold: bool = False) -> LiveSandbox | None:
        """Like :meth:`take`, but when none is ready while more are being started than others
        wait for, wait for one: it is further along than a sandbox started now would be, and
        starting another beside it only slows both. None when none is coming (start one)."""
        while True:
            sandbox = self.take(hold=hold)
            if sandbox is not None or self._starting <= self._awaited:
                return sandbox
            arrived = self._arrived
            self._awaited += 1
            try:
                await arrived.wait()
            finally:
                self._awaited -= 1

    def release(self, sandbox: LiveSandbox) -> None:
        """The run of a taken sandbox ended: refill its place now."""
        if self._claims.pop(id(sandbox), None) is not None:
            self._wanted.set()

    def take_all(self) -> list[LiveSandbox]:
        out = list(self._ready)
        self._ready.clear()
        return out

    async def wait_ready(self, count: int | None = None, *, within_s: float = 60.0) -> None:
        """Wait until ``count`` (default: all) sandboxes are ready — for benchmarks and tests."""
        target = self._size if count is None else min(count, self._size)
        with anyio.fail_after(within_s):
            while self.ready < target:
                if self.last_error is not None and self._starting == 0:
                    raise CodemodeError(f"the warm pool cannot start sandboxes: {self.last_error}")
                self._wanted.set()
                await anyio.sleep(0.005)

    async def run(self) -> None:
        """Keep the pool full until cancelled."""
        async with anyio.create_task_group() as tg:
            while True:
                self._wanted = anyio.Event()
                # Dead entries (e.g. the engine restarted) make room for new ones.
                for sandbox in [s for s in self._ready if not s.usable]:
                    self._ready.remove(sandbox)
                    self._discard(sandbox)
                now = time.monotonic()
                deferred = [due for due in self._claims.values() if due > now]
                missing = self._size - len(self._ready) - self._starting - len(deferred)
                wait = self._retry_at - now
                if missing > 0 and wait <= 0:
                    for _ in range(missing):
                        self._starting += 1
                        tg.start_soon(self._start_one)
                # Wake for: a take or release, the end of a back-off, the next deferred refill.
                wake = [5.0, *(due - now for due in deferred)]
                if missing > 0 and wait > 0:
                    wake.append(wait)
                with anyio.move_on_after(max(min(wake), 0.0)):
                    await self._wanted.wait()
                self._claims = {key: due for key, due in self._claims.items() if due > time.monotonic()}

    async def _start_one(self) -> None:
        try:
            sandbox = await self._start()
        except CodemodeError as exc:
            self.last_error = str(exc)
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)
            log.warning("warm pool: could not start a sandbox (retrying in %.1f s): %s", self._backoff, exc)
        else:
            self.last_error = None
            self._backoff = MIN_BACKOFF_S
            self._ready.append(sandbox)
        finally:
            self._starting -= 1
            self._wanted.set()
            self._arrived.set()
            self._arrived = anyio.Event()
