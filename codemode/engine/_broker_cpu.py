"""The broker's own CPU time for one run, measured per step even when runs share the event loop.

Runs share one thread: while one run's call waits for its server, another run's gates execute.
Thread CPU time read before and after a call would count whatever ran in between. So each of a
run's calls is driven step by step here: the thread's CPU clock is read around every step of the
call's coroutine (from one suspension to the next), and only those steps are added up. What the
broker hands to other threads (ledger writes, large argument checks) and what shared tasks do for
it (the MCP client's reader) are not counted: this is the broker's CPU on the event loop for this
run, its own and no other run's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any

from codemode.calls import (
    CallHandler,
    CallOutcome,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    ToolCallRequest,
)

__all__ = ["BrokerCpu"]


class _Stepped:
    """Awaits ``coroutine``, adding the thread CPU time of each of its steps to ``meter``."""

    def __init__(self, coroutine: Coroutine[Any, Any, CallOutcome], meter: BrokerCpu) -> None:
        self._coroutine = coroutine
        self._meter = meter

    def __await__(self) -> Generator[Any, Any, CallOutcome]:
        coroutine, meter = self._coroutine, self._meter
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.thread_time()
            try:
                yielded = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as stop:
                result: CallOutcome = stop.value
                return result
            finally:
                meter.seconds += time.thread_time() - started
            try:
                sent, thrown = (yield yielded), None
            except BaseException as exc:  # a cancellation thrown in goes on to the coroutine
                sent, thrown = None, exc


class BrokerCpu(CallHandler):
    """A :class:`~codemode.calls.CallHandler` in front of the broker that counts the CPU time of
    one run's calls (see the module docstring); :meth:`step` adds a synchronous step of the run
    (its final filter)."""

    def __init__(self, broker: CallHandler) -> None:
        self._broker = broker
        self.seconds = 0.0

    def _stepped(self, coroutine: Coroutine[Any, Any, CallOutcome]) -> Awaitable[CallOutcome]:
        return _Stepped(coroutine, self)

    @contextlib.contextmanager
    def step(self) -> Generator[None]:
        """Count the block: synchronous work of the broker for this run (nothing else runs)."""
        started = time.thread_time()
        try:
            yield
        finally:
            self.seconds += time.thread_time() - started

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        return await self._stepped(self._broker.call_tool(binding, request))

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        return await self._stepped(self._broker.read_resource(binding, request))

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        return await self._stepped(self._broker.get_prompt(binding, request))
