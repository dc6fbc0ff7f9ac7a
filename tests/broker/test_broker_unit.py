"""Broker.call_tool end to end in this process: gates, consent, budget, ledger, replay, results.

Built with ``codemode.testing`` (tools in memory, a memory ledger): no server, no sandbox, no file.
"""

from __future__ import annotations

from typing import Any

import pytest

from codemode.broker import ApprovalAnswer, ApprovalRequest, CallbackApprover
from codemode.calls import CallDenied, ToolCallRequest, ToolError, ToolResult
from codemode.ledger import Ledger
from codemode.testing import FakeTools, ToolFailure, fake_broker, memory_ledger, open_test_run

pytestmark = pytest.mark.anyio

READ = {"readOnlyHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": False}
CUSTOMER: dict[str, Any] = {
    "type": "object",
    "properties": {"customer_id": {"type": "string"}},
    "required": ["customer_id"],
    "additionalProperties": False,
}


def crm(*, trusted: bool = True) -> FakeTools:
    tools = FakeTools(trusted=frozenset({"crm"}) if trusted else frozenset())
    tools.add(
        "crm", "get_customer", lambda a: {"id": a["customer_id"]}, input_schema=CUSTOMER, annotations=READ
    )
    tools.add(
        "crm", "add_note", lambda a: {"noted": a["customer_id"]}, input_schema=CUSTOMER, annotations=WRITE
    )

    def broken(_: dict[str, Any]) -> object:
        raise ToolFailure("the crm is down for maintenance")

    tools.add("crm", "broken", broken, annotations=READ)
    return tools


def request(
    tools: FakeTools, tool: str, seq: int = 0, key: str | None = None, **arguments: Any
) -> ToolCallRequest:
    spec = tools.live_tool("crm", tool)
    schema_hash = spec.schema_hash if spec else "0" * 64
    return ToolCallRequest(
        seq=seq, server="crm", tool=tool, schema_hash=schema_hash, arguments=arguments, idempotency_key=key
    )


def states(ledger: Ledger, run_id: str) -> list[str]:
    return [str(c.state) for c in ledger.list_calls(run_id=run_id, newest_first=False)]


def approver(answer: bool, asked: list[ApprovalRequest]) -> CallbackApprover:
    async def ask(request: ApprovalRequest) -> ApprovalAnswer:
        asked.append(request)
        return ApprovalAnswer(approved=answer, approver="test", reason="scripted")

    return CallbackApprover(ask)


async def test_an_allowed_read_reaches_the_tool_once_and_leaves_a_ledger_row() -> None:
    tools, ledger = crm(), memory_ledger()
    broker = fake_broker(tools, ledger=ledger)
    binding, _ = open_test_run(broker)
    outcome = await broker.call_tool(binding, request(tools, "get_customer", customer_id="CUST-0001"))
    assert isinstance(outcome, ToolResult), outcome
    assert outcome.structured == {"id": "CUST-0001"}
    assert [c.tool for c in tools.calls] == ["get_customer"]
    assert states(ledger, binding.run_id) == ["succeeded"]
    [call] = ledger.list_calls(run_id=binding.run_id)
    assert call.tool_version == "fake-1.0", "the server's own version is part of the record"


async def test_a_tool_that_is_not_in_the_catalog_is_denied_and_never_sent() -> None:
    tools = crm()
    broker = fake_broker(tools)
    binding, _ = open_test_run(broker)
    outcome = await broker.call_tool(binding, request(tools, "drop_tables"))
    assert isinstance(outcome, CallDenied) and outcome.gate == "tool"
    assert tools.calls == []


async def test_arguments_outside_the_pinned_schema_are_denied() -> None:
    tools = crm()
    broker = fake_broker(tools)
    binding, _ = open_test_run(broker)
    outcome = await broker.call_tool(binding, request(tools, "get_customer", customer_id="C", extra=1))
    assert isinstance(outcome, CallDenied) and outcome.gate == "arguments"
    assert tools.calls == []


async def test_a_write_needs_consent_and_no_approver_means_denied() -> None:
    tools, ledger = crm(), memory_ledger()
    broker = fake_broker(tools, ledger=ledger)
    binding, _ = open_test_run(broker)
    outcome = await broker.call_tool(binding, request(tools, "add_note", customer_id="CUST-0001"))
    assert isinstance(outcome, CallDenied) and outcome.gate == "consent"
    assert tools.calls == []
    assert len(ledger.list_calls(run_id=binding.run_id)) == 1  # the denial is recorded too


@pytest.mark.parametrize("answer", [True, False])
async def test_the_approver_decides_a_write(answer: bool) -> None:
    tools, asked = crm(), list[ApprovalRequest]()
    broker = fake_broker(tools, approver=approver(answer, asked))
    binding, _ = open_test_run(broker)
    outcome = await broker.call_tool(binding, request(tools, "add_note", customer_id="CUST-0002"))
    assert len(asked) == 1 and asked[0].tool == "add_note"
    if answer:
        assert isinstance(outcome, ToolResult)
        assert [c.arguments for c in tools.calls] == [{"customer_id": "CUST-0002"}]
    else:
        assert isinstance(outcome, CallDenied) and outcome.gate == "consent"
        assert tools.calls == []


async def test_an_untrusted_servers_read_hint_does_not_skip_consent() -> None:
    tools, asked = crm(trusted=False), list[ApprovalRequest]()
    broker = fake_broker(tools, approver=approver(False, asked))
    binding, _ = open_test_run(broker)
    outcome = await broker.call_tool(binding, request(tools, "get_customer", customer_id="CUST-0001"))
    assert isinstance(outcome, CallDenied) and outcome.gate == "consent"
    assert len(asked) == 1 and tools.calls == []


async def test_the_call_budget_stops_the_third_call() -> None:
    tools = crm()
    broker = fake_broker(tools, policy={"budget": {"calls_per_run": 2}})
    binding, _ = open_test_run(broker)
    outcomes = [
        await broker.call_tool(binding, request(tools, "get_customer", seq, customer_id=f"CUST-000{seq}"))
        for seq in range(3)
    ]
    assert [type(o).__name__ for o in outcomes] == ["ToolResult", "ToolResult", "CallDenied"]
    denied = outcomes[2]
    assert isinstance(denied, CallDenied) and denied.gate == "budget"
    assert len(tools.calls) == 2


async def test_the_same_idempotency_key_replays_instead_of_calling_again() -> None:
    tools, asked = crm(), list[ApprovalRequest]()
    broker = fake_broker(tools, approver=approver(True, asked))
    binding, _ = open_test_run(broker)
    first = await broker.call_tool(binding, request(tools, "add_note", 0, "note-1", customer_id="CUST-0003"))
    again = await broker.call_tool(binding, request(tools, "add_note", 1, "note-1", customer_id="CUST-0003"))
    assert isinstance(first, ToolResult) and isinstance(again, ToolResult)
    assert again.structured == first.structured
    assert len(tools.calls) == 1 and len(asked) == 1  # a replay is neither sent nor re-approved


async def test_a_tool_failure_is_a_tool_error_not_a_crash() -> None:
    tools = crm()
    broker = fake_broker(tools)
    binding, _ = open_test_run(broker)
    outcome = await broker.call_tool(binding, request(tools, "broken"))
    assert isinstance(outcome, ToolError)
    assert "maintenance" in outcome.message


async def test_deny_mode_refuses_a_principal_that_is_not_configured() -> None:
    tools = crm()
    policy = {"mode": "deny", "principals": {"alice": {"tools": ["crm/*"]}}}
    broker = fake_broker(tools, policy=policy)
    binding, _ = open_test_run(broker, principal="mallory")
    outcome = await broker.call_tool(binding, request(tools, "get_customer", customer_id="CUST-0001"))
    assert isinstance(outcome, CallDenied) and outcome.gate == "principal"
    assert tools.calls == []


async def test_a_call_on_a_run_that_is_not_open_is_denied() -> None:
    tools = crm()
    broker = fake_broker(tools)
    binding, _ = open_test_run(broker)
    broker.close_run(binding.run_id)
    outcome = await broker.call_tool(binding, request(tools, "get_customer", customer_id="CUST-0001"))
    assert isinstance(outcome, CallDenied) and outcome.gate == "principal"


async def test_secrets_in_a_result_are_redacted_before_the_program_sees_them() -> None:
    tools = crm()
    key = {
        "AccessKeyId": "AKIAIOSFODNN7EXAMPLE",
        "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    }
    tools.add("crm", "credentials", lambda _: key, annotations=READ)
    broker = fake_broker(tools)
    binding, _ = open_test_run(broker)
    outcome = await broker.call_tool(binding, request(tools, "credentials"))
    assert isinstance(outcome, ToolResult)
    assert "wJalr" not in repr(outcome) and "AKIAIOSFODNN7EXAMPLE" not in repr(outcome)
    # The ledger records what the filter did (counts, never the values): the evidence of filtering.
    [record] = broker.ledger.list_calls(run_id=binding.run_id)
    assert record.filter_report is not None and record.filter_report["secrets_redacted"] >= 2
    assert "wJalr" not in repr(record)
