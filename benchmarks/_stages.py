"""Where a brokered call's time goes: wall-clock timers wrapped around the broker's stages.

Used by ``broker_bench.py --breakdown``. The wrappers sit on one engine's broker instance (never
on the classes), so the direct path and other engines are untouched. A stage that runs inside
another (a ledger record inside the call) is timed on its own and subtracted from nothing: the
table lists each stage's median per call, and "channel and runtime" is what the sandbox measured
minus the broker's whole handling, so the rows add up to the sandbox's figure.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Generator
from contextlib import contextmanager
from typing import Any

import codemode.broker._broker as broker_module
from codemode.broker import Broker

STAGES = (
    ("gates", "every gate: principal, tool pin, arguments, scope, budget, consent"),
    ("ledger before", "the record written before the request leaves (reserve + sent)"),
    ("mcp call", "the MCP request to the server and its answer, through the host"),
    ("result filter", "secret scan and redaction, PII tokenisation, size and token counts"),
    ("ledger after", "the outcome's record: awaited for a write, queued for a read (and write_ahead)"),
)


class StageClock:
    """Per-call durations (seconds) of each stage, and of the broker's whole handling."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)
        self._current: dict[str, float] = defaultdict(float)

    def add(self, stage: str, seconds: float) -> None:
        self._current[stage] += seconds

    def end_call(self, handled_s: float) -> None:
        staged = 0.0
        for stage, _ in STAGES:
            seconds = self._current.pop(stage, 0.0)
            self.samples[stage].append(seconds)
            staged += seconds
        # Per call, so that the column adds up for each call (medians of parts do not add up).
        self.samples["other broker work"].append(max(0.0, handled_s - staged))
        self.samples["broker total"].append(handled_s)
        self._current.clear()

    def medians_ms(self) -> dict[str, float]:
        return {stage: statistics.median(values) * 1000 for stage, values in self.samples.items() if values}


def _timed(
    clock: StageClock, stage: str, call: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(call)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await call(*args, **kwargs)
        finally:
            clock.add(stage, time.perf_counter() - started)

    return wrapper


def _timed_sync(clock: StageClock, stage: str, call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            clock.add(stage, time.perf_counter() - started)

    return wrapper


@contextmanager
def timing(broker: Broker) -> Generator[StageClock]:
    """Time ``broker``'s stages while the block runs (one call at a time: the timers are shared)."""
    clock = StageClock()
    saved_reserve = broker_module.reserve_waiting
    handle = broker.call_tool

    async def call_tool(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await handle(*args, **kwargs)
        finally:
            clock.end_call(time.perf_counter() - started)

    outcomes = broker.outcomes
    patched: list[tuple[object, str, Any]] = [
        (broker, "call_tool", call_tool),
        (broker, "_decide", _timed(clock, "gates", broker._decide)),  # pyright: ignore[reportPrivateUsage]
        (broker, "_record", _timed(clock, "ledger after", broker._record)),  # pyright: ignore[reportPrivateUsage]
        (broker.consent, "check", _timed(clock, "gates", broker.consent.check)),
        (broker.budget, "commit", _timed_sync(clock, "gates", broker.budget.commit)),
        (broker.backend, "call_tool", _timed(clock, "mcp call", broker.backend.call_tool)),
        (outcomes, "fresh", _timed_sync(clock, "result filter", outcomes.fresh)),
        (broker.ledger, "record_read", _timed_sync(clock, "ledger after", broker.ledger.record_read)),
        (broker.ledger, "complete_later", _timed_sync(clock, "ledger after", broker.ledger.complete_later)),
    ]
    try:
        for obj, name, value in patched:
            setattr(obj, name, value)
        broker_module.reserve_waiting = _timed(clock, "ledger before", saved_reserve)
        yield clock
    finally:
        for obj, name, _ in patched:
            delattr(obj, name)
        broker_module.reserve_waiting = saved_reserve
