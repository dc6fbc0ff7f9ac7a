"""Each gate's allow and deny paths, on hand-built calls (no servers, no sandbox): who calls
(the principal gate) and which tool, as approved (the tool gate); and deny mode's grants
through the whole broker."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from codemode.broker._decisions import Allow, Deny
from codemode.broker._facts import Facts
from codemode.broker._visibility import visible_to
from codemode.broker.gates import PrincipalGate, ToolGate
from codemode.calls import CallDenied, CallOutcome, ToolCallRequest, ToolResult
from codemode.config import PolicyConfig
from codemode.testing import FakeTools, fake_broker, open_test_run
from tests.broker._gate_calls import SCHEMA, Catalog, Pins, context, policy, principal_facts, spec

pytestmark = pytest.mark.anyio


# -- principal ----------------------------------------------------------------------------------


async def test_principal_gate_allows_the_default_principal_in_allow_mode() -> None:
    decision = await PrincipalGate(policy()).check(context(), Facts())
    assert isinstance(decision, Allow) and decision.facts.principal is not None


async def test_principal_gate_refuses_an_unknown_principal_in_deny_mode() -> None:
    gate = PrincipalGate(policy(mode="deny", principals={"alice": {}}))
    decision = await gate.check(context(principal="mallory"), Facts())
    assert isinstance(decision, Deny) and "unknown principal 'mallory'" in decision.reason


async def test_principal_gate_refuses_cross_tenant_access() -> None:
    gate = PrincipalGate(policy(principals={"alice": {"tenants": ["acme"]}}))
    assert isinstance(await gate.check(context(principal="alice", tenant="acme"), Facts()), Allow)
    decision = await gate.check(context(principal="alice", tenant="globex"), Facts())
    assert isinstance(decision, Deny) and "cross-tenant" in decision.reason


async def test_principal_gate_refuses_a_missing_identity() -> None:
    # An expired context: tests/broker/test_broker_clock.py, on the broker's clock.
    gate = PrincipalGate(policy())
    assert isinstance(await gate.check(context(principal=""), Facts()), Deny)
    assert isinstance(await gate.check(context(tenant=""), Facts()), Deny)


# -- tool identity ------------------------------------------------------------------------------


async def test_tool_gate_allows_an_approved_unchanged_tool() -> None:
    tool = spec()
    decision = await ToolGate(policy(), Catalog(tool), Pins(tool)).check(context(tool), principal_facts())
    assert isinstance(decision, Allow)
    assert decision.facts.risk == "high", "no readOnlyHint: high risk"
    assert decision.facts.pinned is not None and decision.facts.tool == tool


async def test_tool_gate_refuses_a_tool_that_was_never_approved() -> None:
    tool = spec()
    decision = await ToolGate(policy(), Catalog(tool), Pins()).check(context(tool), Facts())
    assert isinstance(decision, Deny) and "not approved" in decision.reason


async def test_tool_gate_refuses_a_stub_hash_that_is_not_the_pin() -> None:
    tool = spec()
    call = context(tool)
    assert call.request is not None
    forged = call.request.model_copy(update={"schema_hash": "sha256:" + "0" * 64})
    decision = await ToolGate(policy(), Catalog(tool), Pins(tool)).check(
        dataclasses.replace(call, request=forged), Facts()
    )
    assert isinstance(decision, Deny) and "stale stub" in decision.reason


async def test_tool_gate_refuses_a_rug_pull_where_the_live_definition_changed() -> None:
    approved = spec()
    drifted = spec(schema={**SCHEMA, "properties": {**SCHEMA["properties"], "bcc": {"type": "string"}}})
    decision = await ToolGate(policy(), Catalog(drifted), Pins(approved)).check(context(approved), Facts())
    assert isinstance(decision, Deny) and "changed since approval" in decision.reason


async def test_tool_gate_refuses_a_removed_tool() -> None:
    tool = spec()
    decision = await ToolGate(policy(), Catalog(), Pins(tool)).check(context(tool), Facts())
    assert isinstance(decision, Deny) and "not listed" in decision.reason


async def test_tool_gate_refuses_tools_outside_the_principals_grant() -> None:
    tool = spec()
    rules = policy(principals={"local": {"tools": ["tickets/*"]}})
    decision = await ToolGate(rules, Catalog(tool), Pins(tool)).check(context(tool), Facts())
    assert isinstance(decision, Deny) and "may not use crm/add_note" in decision.reason
    denied = policy(principals={"local": {"tools": ["*"], "deny_tools": ["crm/add_*"]}})
    assert isinstance(await ToolGate(denied, Catalog(tool), Pins(tool)).check(context(tool), Facts()), Deny)


@pytest.mark.parametrize(
    ("annotations", "trusted", "risk"),
    [
        ({"readOnlyHint": True}, True, "low"),
        ({"readOnlyHint": True}, False, "high"),
        ({"readOnlyHint": True, "destructiveHint": True}, False, "high"),
        ({"readOnlyHint": True, "destructiveHint": True}, True, "high"),
        ({"destructiveHint": False}, True, "medium"),
        ({"destructiveHint": False}, False, "high"),
        ({"destructiveHint": True}, True, "high"),
        (None, True, "high"),
        (None, False, "high"),
    ],
)
async def test_risk_never_lowered_by_untrusted_or_contradictory_hints(
    annotations: dict[str, Any] | None, trusted: bool, risk: str
) -> None:
    tool = spec(annotations=annotations)
    decision = await ToolGate(policy(), Catalog(tool, trusted=trusted), Pins(tool)).check(
        context(tool), Facts()
    )
    assert isinstance(decision, Allow) and decision.facts.risk == risk


async def test_the_tool_gate_remembers_policy_answers_per_principal_tool_pin_and_trust() -> None:
    tool = spec(annotations={"readOnlyHint": True})
    rules = policy(principals={"alice": {"tools": ["crm/*"]}, "bob": {"tools": ["other/*"]}})
    catalog = Catalog(tool, trusted=True)
    gate = ToolGate(rules, catalog, Pins(tool))
    for _ in range(2):  # the second round answers from the memo, and must answer the same
        alice = await gate.check(context(tool, principal="alice"), Facts())
        assert isinstance(alice, Allow) and alice.facts.risk == "low"
        bob = await gate.check(context(tool, principal="bob"), Facts())
        assert isinstance(bob, Deny) and "may not use" in bob.reason
    catalog.trusted = False  # the server's hints stop counting: the risk is worked out anew
    untrusted = await gate.check(context(tool, principal="alice"), Facts())
    assert isinstance(untrusted, Allow) and untrusted.facts.risk == "high"


# -- facts --------------------------------------------------------------------------------------


def test_facts_with_copies_and_changes_only_what_it_is_given() -> None:
    before = Facts(trusted=True, scope=("crm:CUST-1",))
    after = before.with_(risk="low", cost=2.0)
    assert after == Facts(trusted=True, scope=("crm:CUST-1",), risk="low", cost=2.0)
    assert before == Facts(trusted=True, scope=("crm:CUST-1",))  # unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.risk = "high"  # type: ignore[misc]


def test_facts_with_refuses_a_name_that_is_not_a_field() -> None:
    with pytest.raises(TypeError, match="no field"):
        Facts().with_(principle=None)


# -- deny mode: only what is listed ---------------------------------------------------------------

SERVERS = ("crm", "tickets", "fs")
TOOLS = ("get", "delete")


def fake_servers() -> FakeTools:
    tools = FakeTools(trusted=frozenset(SERVERS))  # read-only by their hints: no consent in the way
    for server in SERVERS:
        for name in TOOLS:
            tools.add(server, name, lambda _: "done", annotations={"readOnlyHint": True})
    return tools


async def call_every_tool(mode: str) -> tuple[list[CallOutcome], FakeTools, PolicyConfig]:
    tools = fake_servers()
    rules = PolicyConfig.model_validate({"mode": mode, "principals": {"alice": {"tenants": ["acme"]}}})
    broker = fake_broker(tools, policy=rules)
    binding, _ = open_test_run(broker, principal="alice", tenant="acme")
    outcomes: list[CallOutcome] = []
    for seq, (server, name) in enumerate((s, t) for s in SERVERS for t in TOOLS):
        live = tools.live_tool(server, name)
        assert live is not None
        request = ToolCallRequest(
            seq=seq, server=server, tool=name, schema_hash=live.schema_hash, arguments={}
        )
        outcomes.append(await broker.call_tool(binding, request))
    return outcomes, tools, rules


async def test_in_deny_mode_a_principal_with_tenants_but_no_tools_may_call_none() -> None:
    outcomes, tools, rules = await call_every_tool("deny")
    assert all(isinstance(o, CallDenied) and o.gate == "tool" for o in outcomes), outcomes
    assert "principal 'alice' may not use crm/get" in str(outcomes[0])
    assert tools.calls == [], "no call reached a server"
    visible = visible_to(rules, "alice")
    assert not any(visible(spec) for catalog in tools.catalogs() for spec in catalog.tools)


async def test_in_allow_mode_the_same_table_still_grants_every_tool() -> None:
    outcomes, tools, rules = await call_every_tool("allow")
    assert all(isinstance(o, ToolResult) for o in outcomes), outcomes
    assert len(tools.calls) == len(SERVERS) * len(TOOLS)
    visible = visible_to(rules, "alice")
    assert all(visible(spec) for catalog in tools.catalogs() for spec in catalog.tools)
