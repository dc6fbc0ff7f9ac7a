"""A run's progress, told to its caller while it runs (calls so far, seconds elapsed)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from codemode.broker import RunState

ProgressCallback = Callable[[int, float], Awaitable[None]]


async def report_progress(progress: ProgressCallback, state: RunState, interval: float) -> None:
    """Call ``progress(calls_so_far, elapsed_s)`` every ``interval`` seconds, until cancelled."""
    while True:
        await anyio.sleep(interval)
        await progress(state.calls_allowed, state.elapsed())
