"""The warm pool's refill rules, with sandboxes that are plain objects (no process is started).

A sandbox being started is worth waiting for (``take_soon``), and a held one (a batch worker's
session) is replaced only when it is released.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import anyio
import pytest
from anyio.abc import TaskGroup

import codemode.sandbox._pool as pool_module
from codemode.errors import CodemodeError
from codemode.sandbox._live import LiveSandbox
from codemode.sandbox._pool import WarmPool

pytestmark = pytest.mark.anyio


@dataclass
class Stub:
    number: int
    usable: bool = True


class Starter:
    """Starts stand-in sandboxes; each start waits for ``go`` when ``gated``."""

    def __init__(self, *, gated: bool = False, fail: bool = False) -> None:
        self.started = 0
        self.go = anyio.Event()
        self.gated = gated
        self.fail = fail

    async def __call__(self) -> LiveSandbox:
        self.started += 1
        if self.gated:
            await self.go.wait()
        if self.fail:
            raise CodemodeError("no engine")
        return cast(LiveSandbox, Stub(self.started))


async def until(condition: Callable[[], bool], what: str) -> None:
    with anyio.move_on_after(10):
        while not condition():
            await anyio.sleep(0.005)
        return
    raise AssertionError(f"waited 10 s for {what}")


def waiting_taker(tg: TaskGroup, pool: WarmPool) -> list[LiveSandbox | None]:
    """Start a ``take_soon`` in ``tg``; what it got appears in the returned list."""
    taken: list[LiveSandbox | None] = []

    async def take() -> None:
        taken.append(await pool.take_soon())

    tg.start_soon(take)
    return taken


async def test_a_taker_waits_for_the_sandbox_being_started_instead_of_starting_another() -> None:
    starter = Starter(gated=True)
    pool = WarmPool(starter, 1, lambda s: None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.run)
        await until(lambda: starter.started == 1, "the pool to start its sandbox")
        taken = waiting_taker(tg, pool)
        await anyio.sleep(0.05)
        assert taken == [], "it waits rather than answering 'none ready'"
        starter.go.set()
        await until(lambda: bool(taken), "the taker to get the sandbox")
        assert taken == [Stub(1)]
        tg.cancel_scope.cancel()


async def test_more_takers_than_starts_get_none_for_the_rest_and_a_failed_start_gives_none() -> None:
    starter = Starter(gated=True, fail=True)
    pool = WarmPool(starter, 1, lambda s: None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.run)
        await until(lambda: starter.started == 1, "the pool to start its sandbox")
        taken = waiting_taker(tg, pool)
        await anyio.sleep(0.05)
        assert await pool.take_soon() is None, "one start is awaited already: start your own"
        starter.go.set()
        await until(lambda: bool(taken), "the waiting taker to give up")
        assert taken == [None], "the start failed: the taker starts its own (and reports the error)"
        tg.cancel_scope.cancel()


async def test_a_held_sandbox_is_replaced_only_when_released(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "REFILL_DELAY_S", 0.01)
    starter = Starter()
    pool = WarmPool(starter, 1, lambda s: None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.run)
        await until(lambda: pool.ready == 1, "the pool to fill")
        held = pool.take(hold=True)
        assert held is not None
        await anyio.sleep(0.3)  # thirty times the refill delay of a plain take
        assert starter.started == 1 and pool.ready == 0
        pool.release(held)
        await until(lambda: pool.ready == 1, "the refill after the release")
        assert starter.started == 2
        plain = pool.take()
        assert plain is not None
        await until(lambda: starter.started == 3, "a plain take refilled after the delay")
        tg.cancel_scope.cancel()
