"""The broker keeps time on the clock it is given: a run's context, an approval (asked for or
pre-issued) and a run's wall-time budget expire when that clock says so. The tests move a
:class:`~codemode.testing.FakeClock` instead of sleeping."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from codemode.broker import ApprovalAnswer, ApprovalRequest, Broker, CallbackApprover
from codemode.broker.gates._consent import consent_digest
from codemode.calls import CallDenied, CallOutcome, RunBinding, ToolCallRequest, ToolResult
from codemode.ledger import ApprovalRecord
from codemode.testing import FakeClock, FakeTools, fake_broker, memory_ledger, open_test_run

pytestmark = pytest.mark.anyio

TTL_S = 300.0
WRITE = {"readOnlyHint": False, "destructiveHint": True}
READ = {"readOnlyHint": True}
ARGUMENTS = {"customer_id": "C1"}


def crm() -> FakeTools:
    tools = FakeTools(trusted=frozenset({"crm"}))  # its read-only hint counts: reads need no consent
    tools.add("crm", "get", lambda _a: {"ok": 1}, annotations=READ)
    tools.add("crm", "add_note", lambda _a: {"noted": True}, annotations=WRITE)
    return tools


async def call(broker: Broker, binding: RunBinding, tool: str, seq: int = 0) -> CallOutcome:
    live = broker.catalog.live_tool("crm", tool)
    assert live is not None
    request = ToolCallRequest(
        seq=seq, server="crm", tool=tool, schema_hash=live.schema_hash, arguments=dict(ARGUMENTS)
    )
    return await broker.call_tool(binding, request)


# -- the run's context ----------------------------------------------------------------------------


@pytest.mark.parametrize("past_s", [61.0, 365 * 86_400.0], ids=["just-after", "a-year-after"])
async def test_a_run_context_expires_on_the_brokers_clock(past_s: float) -> None:
    clock = FakeClock()
    tools = crm()
    broker = fake_broker(tools, clock=clock)
    binding = RunBinding(
        run_id="run-clock",
        principal="local",
        tenant="default",
        trace_id="t",
        expires_at=clock().timestamp() + 60,
    )
    broker.open_run(binding)
    assert isinstance(await call(broker, binding, "get", 0), ToolResult)
    clock.advance(59)
    assert isinstance(await call(broker, binding, "get", 1), ToolResult), "not expired yet"
    clock.advance(past_s - 59)
    expired = await call(broker, binding, "get", 2)
    assert isinstance(expired, CallDenied) and expired.gate == "principal", expired
    assert "context has expired" in expired.reason
    assert len(tools.calls) == 2, "the call after expiry never reached the server"


# -- approvals a person gives ---------------------------------------------------------------------


def approver_taking(clock: FakeClock, seconds: float, seen: list[ApprovalRequest]) -> CallbackApprover:
    """Says yes after ``seconds`` of the clock have passed (a person thinking it over)."""

    async def answer(request: ApprovalRequest) -> ApprovalAnswer:
        seen.append(request)
        clock.advance(seconds)
        return ApprovalAnswer(True, "operator")

    return CallbackApprover(answer)


@pytest.mark.parametrize(
    "answered_after_s", [TTL_S + 1, 30 * 86_400.0], ids=["a-second-late", "a-month-late"]
)
async def test_an_approval_given_after_it_expired_on_the_brokers_clock_is_void(
    answered_after_s: float,
) -> None:
    clock = FakeClock()
    tools = crm()
    seen: list[ApprovalRequest] = []
    started = clock().timestamp()
    broker = fake_broker(
        tools,
        policy={"consent": {"approval_ttl_s": TTL_S}},
        approver=approver_taking(clock, answered_after_s, seen),
        clock=clock,
    )
    binding, _ = open_test_run(broker)
    denied = await call(broker, binding, "add_note")
    assert isinstance(denied, CallDenied) and denied.gate == "consent", denied
    assert "after it expired" in denied.reason
    assert [r.expires_at for r in seen] == [started + TTL_S], "the expiry is stamped on the broker's clock"
    assert tools.calls == [], "nothing sent"
    [record] = broker.ledger.list_calls(run_id=binding.run_id)
    assert (str(record.state), record.approval_id) == ("denied", None), "no approval recorded"


async def test_an_approval_given_before_it_expired_on_the_brokers_clock_stands() -> None:
    clock = FakeClock()
    tools = crm()
    broker = fake_broker(
        tools,
        policy={"consent": {"approval_ttl_s": TTL_S}},
        approver=approver_taking(clock, TTL_S - 1, []),
        clock=clock,
    )
    binding, _ = open_test_run(broker)
    assert isinstance(await call(broker, binding, "add_note"), ToolResult)
    assert len(tools.calls) == 1


# -- approvals issued beforehand ('codemode approve') ---------------------------------------------


def preissue(broker: Broker, clock: FakeClock, valid_s: float) -> str:
    """What ``codemode approve crm/add_note --args ...`` records, on the ledger's clock."""
    definition: Any = broker.pins.lock.approved_definition("crm", "add_note")
    record = ApprovalRecord.issue(
        tenant="default",
        principal="local",
        server="crm",
        tool="add_note",
        args_digest=consent_digest(dict(ARGUMENTS), definition),
        risk="high",
        approver="cli",
        expires_at=clock() + timedelta(seconds=valid_s),
        now=clock(),
    )
    broker.ledger.record_approval(record)
    return record.approval_id


@pytest.mark.parametrize("later_s", [TTL_S + 1, 10 * 86_400.0], ids=["a-second-late", "days-late"])
async def test_a_preissued_approval_expires_on_the_clock_the_broker_and_ledger_share(later_s: float) -> None:
    clock = FakeClock()
    tools = crm()
    broker = fake_broker(tools, ledger=memory_ledger(clock=clock), clock=clock)
    preissue(broker, clock, TTL_S)
    clock.advance(later_s)
    binding, _ = open_test_run(broker)
    denied = await call(broker, binding, "add_note")
    assert isinstance(denied, CallDenied) and denied.gate == "consent", denied
    assert "needs approval" in denied.reason and tools.calls == []


async def test_a_preissued_approval_still_valid_on_the_shared_clock_is_used() -> None:
    clock = FakeClock()
    tools = crm()
    broker = fake_broker(tools, ledger=memory_ledger(clock=clock), clock=clock)
    approval_id = preissue(broker, clock, TTL_S)
    clock.advance(TTL_S - 1)
    binding, _ = open_test_run(broker)
    assert isinstance(await call(broker, binding, "add_note"), ToolResult)
    [record] = broker.ledger.list_calls(run_id=binding.run_id)
    assert record.approval_id == approval_id


# -- the run's wall-time budget -------------------------------------------------------------------


@pytest.mark.parametrize("past_s", [1.0, 86_400.0], ids=["a-second-over", "a-day-over"])
async def test_the_wall_time_budget_is_counted_on_the_brokers_clock(past_s: float) -> None:
    clock = FakeClock()
    tools = crm()
    broker = fake_broker(tools, policy={"budget": {"wall_time_s": 30}}, clock=clock)
    binding, state = open_test_run(broker)
    clock.advance(29)
    assert state.elapsed() == 29
    assert isinstance(await call(broker, binding, "get", 0), ToolResult)
    clock.advance(1 + past_s)
    over = await call(broker, binding, "get", 1)
    assert isinstance(over, CallDenied) and over.gate == "budget", over
    assert "wall-time budget" in over.reason and len(tools.calls) == 1
