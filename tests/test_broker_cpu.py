"""The broker's CPU for one run is that run's own, also while another run's calls share the loop."""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import pytest

from codemode.calls import (
    CallDenied,
    CallOutcome,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    ToolCallRequest,
    ToolResult,
)
from codemode.engine._broker_cpu import BrokerCpu  # pyright: ignore[reportPrivateUsage]

pytestmark = pytest.mark.anyio

BINDING = RunBinding(run_id="r", principal="p", tenant="t", trace_id="0" * 32)
REQUEST = ToolCallRequest(seq=0, server="s", tool="t", schema_hash="h", arguments={})


def burn(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time."""
    stop = time.thread_time() + seconds
    while time.thread_time() < stop:
        pass


@dataclass
class Handler:
    """Burns ``cpu_s`` of CPU in ``steps`` slices, yielding to the loop between them; or, with
    ``cpu_s`` 0, only waits (``wait_s``): a call whose server is slow."""

    cpu_s: float = 0.0
    steps: int = 10
    wait_s: float = 0.0

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        if self.wait_s:
            await anyio.sleep(self.wait_s)
        for _ in range(self.steps if self.cpu_s else 0):
            burn(self.cpu_s / self.steps)
            await anyio.lowlevel.checkpoint()
        return ToolResult()

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        return CallDenied(gate="resource", reason="not here")

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        return CallDenied(gate="prompt", reason="not here")


async def test_a_waiting_run_is_not_charged_for_the_cpu_of_a_busy_one_beside_it() -> None:
    busy, waiter = BrokerCpu(Handler(cpu_s=0.4)), BrokerCpu(Handler(wait_s=0.01))

    async def wait_through(meter: BrokerCpu) -> None:
        # Calls that wait inside (for their server) while the busy run's slices execute.
        for _ in range(40):
            await meter.call_tool(BINDING, REQUEST)

    async with anyio.create_task_group() as tg:
        tg.start_soon(busy.call_tool, BINDING, REQUEST)
        tg.start_soon(wait_through, waiter)
    assert busy.seconds >= 0.35, busy.seconds
    # Thread CPU read around each whole call would have charged the busy run's slices here too.
    assert waiter.seconds < 0.1, waiter.seconds


async def test_synchronous_steps_of_the_run_count_too() -> None:
    meter = BrokerCpu(Handler())
    with meter.step():
        burn(0.1)
    assert meter.seconds >= 0.09


async def test_a_cancelled_call_is_cancelled_and_its_steps_so_far_counted() -> None:
    meter = BrokerCpu(Handler(cpu_s=0.2, wait_s=30))
    with anyio.move_on_after(0.2) as scope:
        await meter.call_tool(BINDING, REQUEST)
    assert scope.cancelled_caught, "the cancellation reached the call through the stepping"
