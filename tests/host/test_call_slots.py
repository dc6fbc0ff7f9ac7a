"""``[servers.X] max_concurrent_calls``: the server itself counts the requests it has in flight.

The server is a real stdio process (``tests/fixtures/servers/crowded_server.py``): each ``hold``
call waits for one request more than the limit allows, so without the limit the server sees
that many at once, and with it never more than the limit. What the server saw is asked of the
server (``peak``), never inferred from how long anything took.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import CodeMode
from codemode.catalog import save_lock
from codemode.config import Config, config_from_mapping
from codemode.errors import OutcomeUnknownError, ServerRefusedError
from codemode.host import McpHost
from codemode.testing import approved_pins

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "crowded_server.py"
CALLS = 8


def _config(tmp_path: Path, **server: Any) -> Config:
    entry = {"command": sys.executable, "args": [str(SERVER)], "trusted": True, **server}
    return config_from_mapping(
        {"servers": {"crowd": entry}, "sandbox": {"backend": "process", "pool_size": 0}}, base_dir=tmp_path
    )


async def _peak(host: McpHost) -> int:
    answer = await host.call_tool("crowd", "peak", {})
    assert answer.structured_content is not None
    return int(answer.structured_content["result"])


async def _hold_all(host: McpHost, until: int, wait_s: float) -> None:
    async with anyio.create_task_group() as group:
        for _ in range(CALLS):
            group.start_soon(host.call_tool, "crowd", "hold", {"until": until, "wait_s": wait_s})


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_the_server_never_has_more_calls_in_flight_than_the_limit(tmp_path: Path, limit: int) -> None:
    async with McpHost(_config(tmp_path, max_concurrent_calls=limit)) as host:
        # Each call waits (briefly) for one more than the limit: it never comes.
        await _hold_all(host, until=limit + 1, wait_s=0.2)
        assert await _peak(host) <= limit


async def test_without_the_setting_every_call_is_in_flight_at_once(tmp_path: Path) -> None:
    async with McpHost(_config(tmp_path)) as host:
        await _hold_all(host, until=CALLS, wait_s=30)  # returns as soon as all eight are in
        assert await _peak(host) == CALLS


async def test_the_limit_holds_for_several_runs_of_one_engine_together(tmp_path: Path) -> None:
    """Two runs of one engine (as serve's sessions or batch's items), each fanning out two calls
    (within the limit on its own): together they would be four, and each call waits for a third.
    The server sees at most two at once, because the runs share the connection's slots."""
    config = _config(tmp_path, max_concurrent_calls=2)
    async with McpHost(config) as host:
        save_lock(config.lock_path, approved_pins(host.catalogs()).lock)
    program = (
        "import codemode\nfrom servers.crowd import hold, peak\n"
        "codemode.parallel(hold, [{'until': 3, 'wait_s': 0.2}] * 2)\npeak()['result']\n"
    )
    peaks: list[Any] = []
    async with CodeMode(config) as engine:  # programs in the process sandbox

        async def one_run() -> None:
            result = await engine.run(program)
            assert result.status == "ok", result.error
            peaks.append(result.result)

        async with anyio.create_task_group() as group:
            group.start_soon(one_run)
            group.start_soon(one_run)
    assert len(peaks) == 2
    assert max(peaks) <= 2


async def test_a_resource_read_takes_a_slot_too(tmp_path: Path) -> None:
    async with McpHost(_config(tmp_path, max_concurrent_calls=1)) as host:
        async with anyio.create_task_group() as group:
            group.start_soon(host.call_tool, "crowd", "hold", {"until": 2, "wait_s": 0.2})
            group.start_soon(host.read_resource, "crowd", "crowd://peak")
        assert await _peak(host) == 1


async def test_a_call_that_finds_no_free_slot_within_call_timeout_is_refused_unsent(tmp_path: Path) -> None:
    """Three calls queue for one slot; each holds it until call_timeout ends the wait for its
    answer (the barrier is never reached). A call still queued when its own call_timeout has
    passed is refused, and the server never received it."""
    outcomes: list[BaseException] = []

    async def call(host: McpHost) -> None:
        try:
            await host.call_tool("crowd", "hold", {"until": 99, "wait_s": 60})
        except (ServerRefusedError, OutcomeUnknownError) as exc:
            outcomes.append(exc)

    async with McpHost(_config(tmp_path, max_concurrent_calls=1, call_timeout=0.5)) as host:
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(call, host)
        answer = await host.call_tool("crowd", "received", {})
    refused = [e for e in outcomes if isinstance(e, ServerRefusedError)]
    sent = [e for e in outcomes if isinstance(e, OutcomeUnknownError)]
    assert len(outcomes) == 3
    assert refused, "the last in the queue waited longer than call_timeout"
    for refusal in refused:
        assert "nothing was sent" in refusal.reason
        assert "max_concurrent_calls = 1" in refusal.reason
        assert "call_timeout = 0.5 s" in refusal.reason
    assert answer.structured_content == {"result": len(sent)}, "a refused call never reached the server"
