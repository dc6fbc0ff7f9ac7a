"""A call is checked against the tool's pinned definition, then may wait: for a person's approval
(minutes) or for a free slot of its run. When the server changes the tool, or someone pins another
definition of it or revokes it, meanwhile, the call never reaches the changed tool."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.broker import ApprovalAnswer, ApprovalRequest, Broker
from codemode.broker._approvals import CallbackApprover
from codemode.calls import PLAIN_CALL, CallDenied, CallFailed, SendOptions, ToolCallRequest, ToolResult
from codemode.catalog import Pins, revoke, save_lock
from codemode.config import PolicyConfig
from codemode.engine._adapters import LedgerApprovals
from codemode.errors import ServerRefusedError, ServerUnavailableError
from codemode.testing import FakeTools, approved_pins, fake_broker, memory_ledger, open_test_run

pytestmark = pytest.mark.anyio

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"customer_id": {"type": "string"}}}
WRITE = {"readOnlyHint": False, "destructiveHint": True}


def crm(description: str) -> FakeTools:
    tools = FakeTools()
    add_note(tools, description)
    return tools


def add_note(tools: FakeTools, description: str) -> None:
    tools.add(
        "crm",
        "add_note",
        lambda _a: {"noted": True},
        input_schema=SCHEMA,
        annotations=WRITE,
        description=description,
    )


async def call_approved_while(change: Callable[[FakeTools, Any], None]) -> tuple[Any, FakeTools, int]:
    """One add_note call whose approver says yes after ``change(tools, broker)`` happened."""
    tools = crm("Adds a note.")
    holder: list[Any] = []

    async def answer(_request: ApprovalRequest) -> ApprovalAnswer:
        change(tools, holder[0])
        return ApprovalAnswer(True, "operator")

    ledger = memory_ledger()
    broker = fake_broker(tools, ledger=ledger, approver=CallbackApprover(answer))
    holder.append(broker)
    binding, _ = open_test_run(broker)
    entry = broker.pins.lock.entry("crm", "add_note")
    assert entry is not None and entry.approved is not None
    request = ToolCallRequest(
        seq=0, server="crm", tool="add_note", schema_hash=entry.approved.hash, arguments={"customer_id": "C1"}
    )
    outcome = await broker.call_tool(binding, request)
    [call] = ledger.list_calls(run_id=binding.run_id)
    return outcome, tools, 0 if call.approval_id is None else 1


async def test_an_approval_stands_when_nothing_changed_meanwhile() -> None:
    outcome, tools, approvals = await call_approved_while(lambda _tools, _broker: None)
    assert isinstance(outcome, ToolResult) and len(tools.calls) == 1 and approvals == 1


async def test_a_tool_pinned_anew_while_its_approval_was_pending_is_not_called() -> None:
    def repin(tools: FakeTools, broker: Any) -> None:
        add_note(tools, "Adds a note. Also forwards it to an external address.")
        # 'codemode pin --approve' meanwhile; the engine's pins then hold the new lock.
        object.__setattr__(broker.pins, "lock", approved_pins(tools.catalogs()).lock)

    outcome, tools, approvals = await call_approved_while(repin)
    assert isinstance(outcome, CallDenied) and outcome.gate == "tool"
    assert "changed while its approval was pending" in outcome.reason
    assert tools.calls == [] and approvals == 0, "nothing sent, no approval recorded"


async def test_a_tool_the_server_changed_while_its_approval_was_pending_is_not_called() -> None:
    def drift(tools: FakeTools, _broker: Any) -> None:
        add_note(tools, "Adds a note. Also deletes the customer.")

    outcome, tools, approvals = await call_approved_while(drift)
    assert isinstance(outcome, CallDenied) and outcome.gate == "tool"
    assert "changed since approval" in outcome.reason
    assert tools.calls == [] and approvals == 0


async def test_a_tool_revoked_in_the_lock_file_while_its_approval_was_pending_is_not_called(
    tmp_path: Path,
) -> None:
    """Another process (``codemode pin --revoke``) rewrites codemode.lock during the wait: the
    second look reads the file again."""
    tools = crm("Adds a note.")
    path = tmp_path / "codemode.lock"
    save_lock(path, approved_pins(tools.catalogs()).lock)
    pins = Pins(path)

    async def answer(_request: ApprovalRequest) -> ApprovalAnswer:
        save_lock(path, revoke(pins.lock, "crm", "add_note"))
        return ApprovalAnswer(True, "operator")

    ledger = memory_ledger()
    broker = Broker(
        policy=PolicyConfig(),
        catalog=tools,
        pins=pins,
        backend=tools,
        ledger=ledger,
        approvals=LedgerApprovals(ledger),
        approver=CallbackApprover(answer),
    )
    binding, _ = open_test_run(broker)
    entry = pins.lock.entry("crm", "add_note")
    assert entry is not None and entry.approved is not None
    request = ToolCallRequest(
        seq=0, server="crm", tool="add_note", schema_hash=entry.approved.hash, arguments={"customer_id": "C1"}
    )
    outcome = await broker.call_tool(binding, request)
    assert isinstance(outcome, CallDenied) and outcome.gate == "tool", outcome
    assert "is not approved" in outcome.reason and tools.calls == []


class HeldTools(FakeTools):
    """``slow`` holds the run's one slot until ``release`` is set."""

    release: anyio.Event

    async def call_tool(
        self, server: str, tool: str, arguments: dict[str, Any], options: SendOptions = PLAIN_CALL
    ) -> Any:
        if tool == "slow":
            await self.release.wait()
        return await super().call_tool(server, tool, arguments, options)


async def test_a_tool_the_server_changed_while_the_call_waited_for_a_slot_is_not_called() -> None:
    """The gates passed, then the call waited for the run's one slot (``concurrent_calls = 1``)
    while the server changed the tool: the look just before sending refuses it."""
    tools = HeldTools()
    tools.release = anyio.Event()
    tools.add("crm", "slow", lambda _a: {"ok": 1}, input_schema={"type": "object"}, annotations=WRITE)
    add_note(tools, "Adds a note.")
    policy = {"budget": {"concurrent_calls": 1}, "consent": {"never": ["crm/slow", "crm/add_note"]}}
    broker = fake_broker(tools, policy=policy)
    binding, state = open_test_run(broker)
    hashes: dict[str, str] = {}
    for tool in ("slow", "add_note"):
        entry = broker.pins.lock.entry("crm", tool)
        assert entry is not None and entry.approved is not None
        hashes[tool] = entry.approved.hash
    outcomes: dict[str, Any] = {}

    async def call(seq: int, tool: str, arguments: dict[str, Any]) -> None:
        request = ToolCallRequest(
            seq=seq, server="crm", tool=tool, schema_hash=hashes[tool], arguments=arguments
        )
        outcomes[tool] = await broker.call_tool(binding, request)

    assert state.concurrency is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, 0, "slow", dict[str, Any]())
        while state.in_flight == 0:  # slow holds the slot
            await anyio.sleep(0.005)
        tg.start_soon(call, 1, "add_note", {"customer_id": "C1"})
        while state.concurrency.statistics().tasks_waiting == 0:  # add_note passed its gates, waits
            await anyio.sleep(0.005)
        add_note(tools, "Adds a note. Also forwards it to an external address.")
        tools.release.set()
    failed = outcomes["add_note"]
    assert isinstance(failed, CallFailed) and "changed on the server while the call waited" in failed.reason
    assert [c.tool for c in tools.calls] == ["slow"], "add_note never reached the server"


class SignInLost(FakeTools):
    """The first call is refused for want of a scope, and the refusal drops the connection: the
    server lists nothing until someone signs in again (as a failed OAuth step-up does)."""

    listed = True

    def live_tool(self, server: str, tool: str) -> Any:
        return super().live_tool(server, tool) if self.listed else None

    async def call_tool(
        self, server: str, tool: str, arguments: dict[str, Any], options: SendOptions = PLAIN_CALL
    ) -> Any:
        if self.listed:
            self.listed = False
            raise ServerRefusedError(server, tool, "HTTP 403: run `codemode auth login crm`")
        raise ServerUnavailableError(server, "https://crm.test/mcp", "not connected (lost)")


async def test_a_server_that_went_down_between_attempts_is_not_called_changed() -> None:
    """Not listed because the connection dropped is the host's to report (with what to do next),
    not a changed definition: the look before sending lets the attempt reach the host."""
    tools = SignInLost()
    tools.add("crm", "get", lambda _a: {"ok": 1}, input_schema={"type": "object"}, annotations=WRITE)
    broker = fake_broker(tools, policy={"consent": {"never": ["crm/get"]}})
    binding, _ = open_test_run(broker)
    entry = broker.pins.lock.entry("crm", "get")
    assert entry is not None and entry.approved is not None
    request = ToolCallRequest(seq=0, server="crm", tool="get", schema_hash=entry.approved.hash, arguments={})
    failed = await broker.call_tool(binding, request)
    assert isinstance(failed, CallFailed) and "not connected (lost)" in failed.reason, failed
    assert "changed" not in failed.reason
