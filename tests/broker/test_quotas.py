"""``[policy.quotas]`` in the broker: a run over a quota is refused before it starts and a call
over one before it is sent, each with which quota, its limit and when to retry, and the refusal
in the ledger; a run's concurrent-run slot is free again however the run ends. The clock is a
:class:`~codemode.testing.FakeClock`: windows roll over without sleeping."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from codemode._metrics import enable as enable_metrics
from codemode.broker import Broker, RunOutput
from codemode.calls import CallDenied, CallOutcome, RunBinding, ToolCallRequest, ToolResult
from codemode.errors import QuotaExceededError
from codemode.testing import FakeClock, FakeTools, fake_broker

pytestmark = pytest.mark.anyio

START = datetime(2026, 3, 2, 10, 15, 30, tzinfo=UTC)


def crm() -> FakeTools:
    tools = FakeTools(trusted=frozenset({"crm"}))
    tools.add("crm", "get", lambda _a: {"ok": 1}, annotations={"readOnlyHint": True})
    return tools


def quota_broker(quotas: dict[str, Any], tools: FakeTools, clock: FakeClock, **policy: Any) -> Broker:
    return fake_broker(tools, policy={"quotas": quotas, **policy}, clock=clock)


def binding_of(principal: str = "local", tenant: str = "default") -> RunBinding:
    return RunBinding(run_id=f"run_{uuid.uuid4().hex[:12]}", principal=principal, tenant=tenant, trace_id="t")


async def one_run(broker: Broker, binding: RunBinding | None = None) -> None:
    async with broker.run(binding or binding_of(), "sha256:code") as scope:
        scope.finish("ok", RunOutput())


async def call(broker: Broker, tools: FakeTools, binding: RunBinding, seq: int = 0) -> CallOutcome:
    spec = tools.live_tool("crm", "get")
    assert spec is not None
    request = ToolCallRequest(seq=seq, server="crm", tool="get", schema_hash=spec.schema_hash, arguments={})
    return await broker.call_tool(binding, request)


async def test_a_principal_over_its_runs_per_minute_is_refused_until_the_minute_rolls_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(START)
    broker = quota_broker({"default": {"runs_per_minute": 2}}, crm(), clock)
    monkeypatch.setattr("codemode._metrics._active", None)  # metrics of this test only, undone after
    metrics = enable_metrics()
    await one_run(broker)
    await one_run(broker)
    refused = binding_of()
    with pytest.raises(QuotaExceededError) as caught:
        await one_run(broker, refused)
    error = caught.value
    assert error.retry_after_s == 30.0
    assert error.quota["quota"] == "runs_per_minute" and error.quota["limit"] == 2
    assert (error.quota["holder"], error.quota["name"]) == ("principal", "local")
    assert "runs_per_minute = 2" in str(error) and "retry after 30 s" in str(error)
    record = broker.ledger.get_run(refused.run_id)
    assert record is not None and record.status == "refused", "the refusal is recorded as the run's end"
    assert metrics.quota_refusals.labels("run", "runs_per_minute")._value.get() == 1  # pyright: ignore[reportPrivateUsage]
    clock.advance(30)
    await one_run(broker)


async def test_a_tenant_quota_counts_every_principal_of_the_tenant_by_the_hour() -> None:
    clock = FakeClock(START)
    policy = {"principals": {"ann": {"tenants": ["acme"]}, "ben": {"tenants": ["acme"]}}}
    broker = quota_broker({"tenants": {"acme": {"runs_per_hour": 2}}}, crm(), clock, **policy)
    await one_run(broker, binding_of("ann", "acme"))
    await one_run(broker, binding_of("ben", "acme"))
    with pytest.raises(QuotaExceededError, match="tenant 'acme'") as caught:
        await one_run(broker, binding_of("ann", "acme"))
    assert caught.value.retry_after_s == 45 * 60 - 30
    await one_run(broker, binding_of("cy", "default"))  # another tenant is not counted with acme
    clock.advance(45 * 60)
    await one_run(broker, binding_of("ann", "acme"))


async def test_tool_calls_per_day_refuse_the_call_before_it_is_sent_and_the_ledger_records_it() -> None:
    clock = FakeClock(START)
    tools = crm()
    quotas = {"default": {"tool_calls_per_day": 5}, "principals": {"local": {"tool_calls_per_day": 2}}}
    broker = quota_broker(quotas, tools, clock)
    binding = binding_of()
    async with broker.run(binding, "sha256:code") as scope:
        assert isinstance(await call(broker, tools, binding, 0), ToolResult)
        assert isinstance(await call(broker, tools, binding, 1), ToolResult)
        denied = await call(broker, tools, binding, 2)
        scope.finish("ok", RunOutput())
    assert isinstance(denied, CallDenied) and denied.gate == "quota", denied
    assert "tool_calls_per_day = 2" in denied.reason and "retry after" in denied.reason
    assert "2026-03-03T00:00:00" in denied.reason
    assert len(tools.calls) == 2, "the refused call never reached the server"
    record = broker.ledger.get_call(f"{binding.run_id}/2")
    assert record is not None and record.state == "denied" and record.gate == "quota"
    clock.now = datetime(2026, 3, 3, 0, 0, tzinfo=UTC)
    later = binding_of()
    async with broker.run(later, "sha256:code") as scope:
        assert isinstance(await call(broker, tools, later), ToolResult), "a new day"
        scope.finish("ok", RunOutput())


async def test_money_per_hour_counts_the_prices_of_the_budget() -> None:
    clock = FakeClock(START)
    tools = crm()
    broker = quota_broker(
        {"default": {"money_per_hour": 1.0}}, tools, clock, budget={"costs": {"crm/get": 0.4}}
    )
    binding = binding_of()
    async with broker.run(binding, "sha256:code") as scope:
        outcomes = [await call(broker, tools, binding, seq) for seq in range(3)]
        scope.finish("ok", RunOutput())
    assert [type(o).__name__ for o in outcomes] == ["ToolResult", "ToolResult", "CallDenied"]
    denied = outcomes[2]
    assert isinstance(denied, CallDenied) and "money_per_hour = 1" in denied.reason


async def test_a_concurrent_run_slot_is_freed_when_the_run_ends_errs_or_is_cancelled() -> None:
    clock = FakeClock(START)
    broker = quota_broker({"default": {"concurrent_runs": 1}}, crm(), clock)
    async with broker.run(binding_of(), "sha256:code") as scope:
        with pytest.raises(QuotaExceededError, match="concurrent_runs = 1") as caught:
            await one_run(broker)
        assert caught.value.retry_after_s == 1.0
        scope.finish("ok", RunOutput())
    await one_run(broker)  # ended: free

    with pytest.raises(RuntimeError, match="crashed"):
        async with broker.run(binding_of(), "sha256:code"):
            raise RuntimeError("the run crashed")
    await one_run(broker)  # errored: free

    with anyio.CancelScope() as cancelled:
        async with broker.run(binding_of(), "sha256:code"):
            cancelled.cancel()
            await anyio.sleep(1)
    assert cancelled.cancelled_caught
    await one_run(broker)  # cancelled: free


async def test_without_quotas_nothing_is_counted() -> None:
    broker = fake_broker(crm(), clock=FakeClock(START))
    assert broker.run_quotas is None and broker.quota is None
    for _ in range(5):
        await one_run(broker)


async def test_a_checking_run_inside_a_run_and_a_compensation_take_no_run_quota() -> None:
    clock = FakeClock(START)
    tools = crm()
    broker = quota_broker({"default": {"concurrent_runs": 1, "runs_per_hour": 1}}, tools, clock)
    async with broker.run(binding_of(), "sha256:code") as scope:
        check = binding_of().model_copy(update={"read_only": True})
        await one_run(broker, check)  # a verify program checking this run's result
        scope.finish("ok", RunOutput())
    undo = binding_of().model_copy(update={"compensates": "run_x/0"})
    async with broker.run(undo, "sha256:undo") as scope:
        assert isinstance(await call(broker, tools, undo), ToolResult)
        scope.finish("ok", RunOutput())
    with pytest.raises(QuotaExceededError, match="runs_per_hour = 1"):
        await one_run(broker)


async def test_a_checking_runs_tool_call_takes_no_concurrent_run_slot() -> None:
    clock = FakeClock(START)
    tools = crm()
    broker = quota_broker({"default": {"concurrent_runs": 1}}, tools, clock)
    async with broker.run(binding_of(), "sha256:code") as scope:
        check = binding_of().model_copy(update={"read_only": True})
        async with broker.run(check, "sha256:check") as checking:
            assert isinstance(await call(broker, tools, check), ToolResult)  # the check reads a tool
            checking.finish("ok", RunOutput())
        scope.finish("ok", RunOutput())
    await one_run(broker)  # no slot was left behind by the check's call


async def test_a_call_never_brings_back_an_expired_slot() -> None:
    clock = FakeClock(START)
    tools = crm()
    broker = quota_broker({"default": {"concurrent_runs": 1}, "run_slot_ttl_s": 60}, tools, clock)
    stale = binding_of()
    async with broker.run(stale, "sha256:code") as scope:
        clock.advance(120)  # its slot expired: another run may start
        await one_run(broker)
        assert isinstance(await call(broker, tools, stale), ToolResult)  # the stale run calls a tool
        await one_run(broker)  # its call did not take the slot back
        scope.finish("ok", RunOutput())
