"""The broker's two recording paths: a write is recorded before it is sent, a read after.

A read (read-only by a trusted annotation or the policy, without an idempotency key) goes out
with no record in the ledger and leaves exactly one row once it is over; a write's row exists,
``sent``, while the server works on it.
"""

from __future__ import annotations

from typing import Any

import pytest

from codemode.calls import CallFailed, ToolResult
from codemode.errors import OutcomeUnknownError, ServerRefusedError
from codemode.ledger import Ledger
from codemode.testing import FakeTools, fake_broker, memory_ledger, open_test_run
from tests.broker.test_broker_unit import CUSTOMER, READ, WRITE, request

pytestmark = pytest.mark.anyio


def tools_watching(ledger: Ledger, seen: list[list[str]], run_id: list[str]) -> FakeTools:
    """A crm whose tools note the run's ledger rows (state) at the moment they run."""

    def look(answer: dict[str, Any]) -> Any:
        seen.append([str(c.state) for c in ledger.list_calls(run_id=run_id[0])])
        return answer

    tools = FakeTools(trusted=frozenset({"crm"}))
    tools.add(
        "crm",
        "get_customer",
        lambda a: look({"id": a["customer_id"]}),
        input_schema=CUSTOMER,
        annotations=READ,
    )
    tools.add("crm", "add_note", lambda a: look({"noted": True}), input_schema=CUSTOMER, annotations=WRITE)
    return tools


async def test_a_read_leaves_no_record_before_its_answer_and_one_after() -> None:
    ledger, seen, run_id = memory_ledger(), list[list[str]](), [""]
    tools = tools_watching(ledger, seen, run_id)
    broker = fake_broker(tools, ledger=ledger)
    binding, _ = open_test_run(broker)
    run_id[0] = binding.run_id
    outcome = await broker.call_tool(binding, request(tools, "get_customer", customer_id="CUST-1"))
    assert isinstance(outcome, ToolResult)
    assert seen == [[]], "nothing was written before the read went out"
    [call] = ledger.list_calls(run_id=binding.run_id)
    assert call.state == "succeeded"
    assert [e.kind for e in ledger.events(call.call_id)] == ["call_read"]


async def test_a_write_is_recorded_as_sent_before_the_server_runs_it() -> None:
    ledger, seen, run_id = memory_ledger(), list[list[str]](), [""]
    tools = tools_watching(ledger, seen, run_id)
    broker = fake_broker(tools, ledger=ledger, policy={"consent": {"never": ["crm/add_note"]}})
    binding, _ = open_test_run(broker)
    run_id[0] = binding.run_id
    outcome = await broker.call_tool(binding, request(tools, "add_note", customer_id="CUST-1"))
    assert isinstance(outcome, ToolResult), outcome
    assert seen == [["sent"]]
    [call] = ledger.list_calls(run_id=binding.run_id)
    assert [e.kind for e in ledger.events(call.call_id)] == ["call_reserved", "call_sent", "call_completed"]


async def test_a_read_without_an_answer_fails_plainly_and_a_write_stays_unknown() -> None:
    def no_answer(arguments: dict[str, Any]) -> Any:
        raise OutcomeUnknownError("crm", "tool", "no answer within call_timeout = 1 s")

    tools = FakeTools(trusted=frozenset({"crm"}))
    tools.add("crm", "get_customer", no_answer, input_schema=CUSTOMER, annotations=READ)
    tools.add("crm", "add_note", no_answer, input_schema=CUSTOMER, annotations=WRITE)
    ledger = memory_ledger()
    broker = fake_broker(tools, ledger=ledger, policy={"consent": {"never": ["crm/add_note"]}})
    binding, state = open_test_run(broker)
    read = await broker.call_tool(binding, request(tools, "get_customer", customer_id="CUST-1"))
    assert isinstance(read, CallFailed) and not read.outcome_unknown
    assert "calling it again is safe" in read.reason
    assert state.unknown_outcomes == 0
    write = await broker.call_tool(binding, request(tools, "add_note", customer_id="CUST-1"))
    assert isinstance(write, CallFailed) and write.outcome_unknown
    assert state.unknown_outcomes == 1
    assert sorted((c.tool, c.state) for c in ledger.list_calls(run_id=binding.run_id)) == [
        ("add_note", "unknown"),
        ("get_customer", "failed"),
    ]
    assert [c.tool for c in ledger.unknown_calls()] == ["add_note"], "only the write needs reconciling"


async def test_a_refused_read_is_retried_and_each_attempt_recorded() -> None:
    attempts: list[int] = []

    def busy_once(arguments: dict[str, Any]) -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise ServerRefusedError("crm", "get_customer", "HTTP 503", retry_after=0.0)
        return {"id": arguments["customer_id"]}

    tools = FakeTools(trusted=frozenset({"crm"}))
    tools.add("crm", "get_customer", busy_once, input_schema=CUSTOMER, annotations=READ)
    ledger = memory_ledger()
    broker = fake_broker(tools, ledger=ledger)
    binding, _ = open_test_run(broker)
    outcome = await broker.call_tool(binding, request(tools, "get_customer", customer_id="CUST-1"))
    assert isinstance(outcome, ToolResult)
    rows = sorted((c.call_id.rpartition("/")[2], c.state) for c in ledger.list_calls(run_id=binding.run_id))
    assert [state for _, state in rows] == ["refused", "succeeded"]


async def test_a_read_the_policy_declares_read_only_takes_the_read_path_on_an_untrusted_server() -> None:
    tools = FakeTools()  # untrusted: its readOnlyHint counts for nothing
    tools.add("crm", "lookup", lambda a: {"ok": True}, annotations=READ)
    ledger = memory_ledger()
    broker = fake_broker(tools, ledger=ledger, policy={"consent": {"read_only": ["crm/lookup"]}})
    binding, _ = open_test_run(broker)
    assert isinstance(await broker.call_tool(binding, request(tools, "lookup")), ToolResult)
    [call] = ledger.list_calls(run_id=binding.run_id)
    assert [e.kind for e in ledger.events(call.call_id)] == ["call_read"]


@pytest.mark.parametrize("durable", [True, False], ids=["full", "write_ahead"])
async def test_a_writes_outcome_is_awaited_unless_durability_is_write_ahead(
    durable: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = FakeTools(trusted=frozenset({"crm"}))
    tools.add("crm", "add_note", lambda a: {"noted": True}, input_schema=CUSTOMER, annotations=WRITE)
    ledger = memory_ledger()
    how: list[str] = []
    complete, complete_later = ledger.complete, ledger.complete_later

    def awaited(*args: Any, **kwargs: Any) -> Any:
        how.append("awaited")
        return complete(*args, **kwargs)

    def queued(*args: Any, **kwargs: Any) -> None:
        how.append("queued")
        complete_later(*args, **kwargs)

    monkeypatch.setattr(ledger, "complete", awaited)
    monkeypatch.setattr(ledger, "complete_later", queued)
    broker = fake_broker(tools, ledger=ledger, policy={"consent": {"never": ["crm/add_note"]}})
    broker.durable_outcomes = durable
    binding, _ = open_test_run(broker)
    assert isinstance(
        await broker.call_tool(binding, request(tools, "add_note", customer_id="C-1")), ToolResult
    )
    assert how == ["awaited" if durable else "queued"]
    [call] = ledger.list_calls(run_id=binding.run_id)
    assert call.state == "succeeded"
    kinds = [e.kind for e in ledger.events(call.call_id)]
    assert kinds == ["call_reserved", "call_sent", "call_completed"], "the write-ahead record either way"


def test_the_ledgers_durability_setting_defaults_to_full_and_refuses_unknown_values() -> None:
    from codemode.config import config_from_mapping
    from codemode.errors import ConfigError

    assert config_from_mapping({}).ledger.durability == "full"
    assert config_from_mapping({"ledger": {"durability": "write_ahead"}}).ledger.durability == "write_ahead"
    with pytest.raises(ConfigError, match="durability"):
        config_from_mapping({"ledger": {"durability": "sometimes"}})


async def test_a_call_whose_handling_raises_fails_and_counts_as_unknown(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the broker must neither end the run nor leave its count of unknown outcomes
    short: the request may have reached the server before the bug struck."""
    tools = tools_watching(memory_ledger(), [], [""])
    broker = fake_broker(tools)
    binding, state = open_test_run(broker)

    async def broken(*_args: object) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(broker, "_decide", broken)
    outcome = await broker.call_tool(binding, request(tools, "add_note", customer_id="CUST-1"))
    assert isinstance(outcome, CallFailed) and outcome.outcome_unknown
    assert outcome.reason == "the host failed while handling the call"
    assert state.unknown_outcomes == 1
    assert "RuntimeError: a bug" in caplog.text
