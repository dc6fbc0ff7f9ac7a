"""``[servers.X] max_concurrent_calls``: at most N requests in flight to one server at once.

Some servers lose work under concurrent requests (a store that reads, changes and writes back a
whole file per call). The policy's budget caps calls per run; this caps them per server, for the
whole process: the connection holds the slots, and every run of an engine (``serve``'s sessions,
``batch``'s items) shares the engine's one connection per server. A request waits for a slot
before anything is sent; one that waits longer than the server's ``call_timeout`` is refused,
unsent, so the broker may retry it and the ledger never calls it ``unknown``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import anyio

from codemode.errors import ServerRefusedError


class CallSlots:
    """The request slots of one server; ``limit`` None: no limit (nothing is counted)."""

    def __init__(self, server: str, limit: int | None, wait_s: float) -> None:
        self.server = server
        self.limit = limit
        self._wait_s = wait_s
        # A semaphore, not a CapacityLimiter: a slot belongs to a request, not to a task.
        self._free = None if limit is None else anyio.Semaphore(limit)

    @asynccontextmanager
    async def hold(self, what: str) -> AsyncGenerator[None]:
        """Hold a slot while a request for ``what`` (a tool, URI or prompt) is out.

        Raises:
            ServerRefusedError: no slot came free within ``call_timeout``; nothing was sent.
        """
        free = self._free
        if free is None:
            yield
            return
        with anyio.move_on_after(self._wait_s) as waiting:
            await free.acquire()
        if waiting.cancelled_caught:
            raise ServerRefusedError(
                self.server,
                what,
                f"all {self.limit} of its request slots stayed busy for call_timeout = {self._wait_s:g} s "
                f"([servers.{self.server}] max_concurrent_calls = {self.limit}); nothing was sent",
            )
        try:
            yield
        finally:
            free.release()
