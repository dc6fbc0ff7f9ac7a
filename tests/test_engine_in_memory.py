"""CodeMode with an in-process MCP server (codemode.testing.in_memory_transports): no server process.

The real SDK client and server speak MCP in memory; the host, pins, gates and ledger are real.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from codemode import CodeMode, config_from_mapping
from codemode.broker import ApprovalAnswer, ApprovalRequest, CallbackApprover
from codemode.calls import CallDenied, ToolResult
from codemode.catalog import approve, load_lock, observe, save_lock
from codemode.config import Config, PolicyConfig
from codemode.errors import SandboxError
from codemode.host import ConnectionState, McpHost, TransportFactory
from codemode.ledger import open_ledger
from codemode.testing import FakeClock, in_memory_transports

pytestmark = pytest.mark.anyio


def crm_server() -> MCPServer:
    app = MCPServer("crm", version="1.4.2")

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    def get_customer(customer_id: str) -> dict[str, str]:
        """Look up one customer."""
        return {"id": customer_id, "name": "Acme"}

    @app.tool()
    def delete_customer(customer_id: str) -> str:
        """Delete a customer."""
        return f"deleted {customer_id}"

    return app


async def approved_in_memory_crm(
    tmp_path: Path, server: MCPServer | None = None, **sections: dict[str, Any]
) -> tuple[Config, dict[str, TransportFactory]]:
    """A config whose crm server (``server``, by default this module's) is in memory - its
    command is never run - with its tools approved."""
    data: dict[str, Any] = {
        "servers": {"crm": {"command": "not-a-real-command", "trusted": True}},
        "sandbox": {"backend": "process", "pool_size": 0},
        **sections,
    }
    config = config_from_mapping(data, base_dir=tmp_path)
    transports = in_memory_transports({"crm": server or crm_server()})
    async with McpHost(config, transports=transports) as host:
        [status] = host.statuses()
        assert status.state is ConnectionState.READY, status.error
        lock = load_lock(config.lock_path)
        for catalog in host.catalogs():
            lock, _ = observe(lock, catalog)
        save_lock(config.lock_path, approve(lock)[0])
    return config, transports


@pytest.mark.integration
async def test_a_call_through_an_in_memory_server_is_gated_and_recorded(tmp_path: Path) -> None:
    config, transports = await approved_in_memory_crm(tmp_path)
    async with CodeMode(config, transports=transports) as engine:
        read = await engine.call_tool("crm", "get_customer", {"customer_id": "CUST-1"}, purpose="test")
        assert isinstance(read, ToolResult), read
        assert read.structured == {"id": "CUST-1", "name": "Acme"}
        # Not read-only: it needs consent, and no approver is configured.
        write = await engine.call_tool("crm", "delete_customer", {"customer_id": "CUST-1"}, purpose="test")
        assert isinstance(write, CallDenied) and write.gate == "consent"
    ledger = open_ledger(config.ledger_path, create=False)
    try:
        calls = [(c.tool, str(c.state), c.tool_version) for c in ledger.list_calls(newest_first=False)]
    finally:
        ledger.close()
    # The record names the server's own version (serverInfo.version) beside the tool.
    assert calls == [("get_customer", "succeeded", "1.4.2"), ("delete_customer", "denied", "1.4.2")]


def test_a_transport_for_a_server_that_is_not_configured_is_an_error(tmp_path: Path) -> None:
    config = config_from_mapping({"servers": {}}, base_dir=tmp_path)
    with pytest.raises(ValueError, match="not configured: crm"):
        McpHost(config, transports=in_memory_transports({"crm": crm_server()}))


@pytest.mark.integration
async def test_a_program_calls_an_in_memory_server_through_the_sandbox(tmp_path: Path) -> None:
    """The program still runs in a real sandbox (process backend); only the server is in memory."""
    config, transports = await approved_in_memory_crm(tmp_path)
    program = (
        "from servers.crm import get_customer\n[get_customer(customer_id=f'C{i}')['id'] for i in range(3)]"
    )
    async with CodeMode(config, transports=transports) as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    assert result.result == ["C0", "C1", "C2"]
    assert result.calls == 3


@pytest.mark.integration
async def test_sessions_keep_state_and_the_least_recently_used_goes_past_max_sessions(tmp_path: Path) -> None:
    config, transports = await approved_in_memory_crm(tmp_path, serve={"max_sessions": 2})
    async with CodeMode(config, transports=transports) as engine:
        first = await engine.open_session()
        second = await engine.open_session()
        assert (await engine.run("x = 'first'", session_id=first)).status == "ok"
        assert (await engine.run("x = 'second'", session_id=second)).status == "ok"
        kept = await engine.run("x", session_id=first)
        assert kept.result == "first", kept.error
        # A third session closes the least recently used one (second): its state is gone.
        third = await engine.open_session()
        assert (await engine.run("x", session_id=first)).result == "first"
        gone = await engine.run("x", session_id=second)
        assert gone.status == "error" and gone.error is not None and "NameError" in gone.error.type
        await engine.close_session(first)
        after_close = await engine.run("x", session_id=first)
        assert after_close.status == "error" and after_close.error is not None
        assert "NameError" in after_close.error.type
        # Another principal cannot reach a session by its id: the same id is a new session for it.
        assert (await engine.run("x = 'mine'", session_id=third)).status == "ok"
        other = await engine.run("x", session_id=third, principal="bob")
        assert other.status == "error" and other.error is not None and "NameError" in other.error.type


async def _until_busy(engine: CodeMode, count: int) -> None:
    sandboxes = engine._sandboxes  # pyright: ignore[reportPrivateUsage]
    assert sandboxes is not None
    with anyio.fail_after(30):
        while sum(s.busy for s in sandboxes.sessions) < count:
            await anyio.sleep(0.01)


@pytest.mark.integration
async def test_a_running_session_is_neither_evicted_nor_expired(tmp_path: Path) -> None:
    # Idle time runs from a run's end: a run longer than session_idle_s is not idle. Last uses are
    # moved back by hand, and the runs outlast the steps between them by seconds, even under load.
    config, transports = await approved_in_memory_crm(
        tmp_path, serve={"max_sessions": 2, "session_idle_s": 60}
    )
    async with CodeMode(config, transports=transports) as engine:
        first = await engine.open_session()
        await engine.open_session()
        outcomes: list[Any] = []

        async def long_run(session_id: str) -> None:
            program = "import time\ntime.sleep(8)\n'finished'"
            outcomes.append(await engine.run(program, session_id=session_id))

        sandboxes = engine._sandboxes  # pyright: ignore[reportPrivateUsage]
        assert sandboxes is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(long_run, first)
            await _until_busy(engine, 1)
            for session in sandboxes.sessions:
                session.last_used -= 120  # both are now older than session_idle_s by last use
            assert await engine.expire_idle_sessions() == 1, "only the idle one expires"
            tg.start_soon(long_run, await engine.open_session())
            await _until_busy(engine, 2)
            with pytest.raises(SandboxError, match="running programs"):
                await engine.open_session()  # at max_sessions, and closing either would kill a run
        assert [(o.status, o.result) for o in outcomes] == [("ok", "finished")] * 2


# -- one clock for the engine: ledger, broker and run expiry --------------------------------------


@pytest.mark.integration
async def test_an_approval_given_too_late_on_the_engines_clock_is_void_and_the_ledger_keeps_that_time(
    tmp_path: Path,
) -> None:
    config, transports = await approved_in_memory_crm(tmp_path)
    ttl = config.policy.consent.approval_ttl_s
    # A day behind the real time: only a clock that reached the broker and the ledger explains
    # what they decide and record.
    start = datetime.now(UTC) - timedelta(days=1)
    clock = FakeClock(start)

    async def late(_request: ApprovalRequest) -> ApprovalAnswer:
        clock.advance(ttl + 1)
        return ApprovalAnswer(True, "operator")

    async with CodeMode(config, transports=transports, clock=clock) as engine:
        outcome = await engine.call_tool(
            "crm", "delete_customer", {"customer_id": "C1"}, purpose="test", approver=CallbackApprover(late)
        )
    assert isinstance(outcome, CallDenied) and outcome.gate == "consent", outcome
    assert "after it expired" in outcome.reason
    ledger = open_ledger(config.ledger_path, create=False)
    try:
        [run] = ledger.list_runs()
    finally:
        ledger.close()
    assert (run.started_at, run.finished_at) == (start, start + timedelta(seconds=ttl + 1))


def clock_crm(clock: FakeClock, seconds: float) -> MCPServer:
    app = crm_server()

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    def wait_a_while() -> str:
        """Takes its time (on the test's clock)."""
        clock.advance(seconds)
        return "done"

    return app


@pytest.mark.integration
async def test_a_programs_run_context_expires_on_the_engines_clock(tmp_path: Path) -> None:
    start = datetime.now(UTC) - timedelta(days=1)  # by the real time, the run would be long over
    clock = FakeClock(start)
    lifetime = PolicyConfig().budget.wall_time_s + 60  # a run's context outlives its budget by a minute
    config, transports = await approved_in_memory_crm(tmp_path, clock_crm(clock, lifetime + 1))
    program = (
        "from servers.crm import get_customer, wait_a_while\n"
        "wait_a_while()\n"
        "try:\n"
        "    outcome = get_customer(customer_id='C1')\n"
        "except Exception as exc:\n"
        "    outcome = str(exc)\n"
        "outcome\n"
    )
    async with CodeMode(config, transports=transports, clock=clock) as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    assert "context has expired" in str(result.result), result.result
