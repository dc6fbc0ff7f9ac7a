"""Each gate's allow and deny paths, on hand-built calls (no servers, no sandbox)."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from codemode.broker._approvals import ApprovalAnswer, ApprovalRequest, CallbackApprover
from codemode.broker._decisions import Allow, Deny, NeedsApproval
from codemode.broker._facts import Call, Facts
from codemode.broker._run import RunState
from codemode.broker.gates import (
    ApprovalFlow,
    ArgumentGate,
    BudgetGate,
    ConsentGate,
    PrincipalGate,
    ScopeGate,
    ServerGate,
    ToolGate,
    _memo,
    check_path,
)
from codemode.calls import RunBinding, ToolCallRequest
from codemode.catalog import LockFile, ServerCatalog, ToolSpec, approve, observe, tool_hash
from codemode.config import PolicyConfig, Risk
from codemode.ledger import arguments_digest

pytestmark = pytest.mark.anyio

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer_id": {"type": "string", "pattern": "^CUST-[0-9]{4}$"},
        "note": {"type": "string"},
    },
    "required": ["customer_id"],
}


def spec(
    name: str = "add_note", *, annotations: dict[str, Any] | None = None, schema: Any = None
) -> ToolSpec:
    schema = SCHEMA if schema is None else schema
    digest = tool_hash(
        name=name,
        title=None,
        description="d",
        input_schema=schema,
        output_schema=None,
        annotations=annotations,
    )
    return ToolSpec(
        server="crm",
        name=name,
        description="d",
        input_schema=schema,
        annotations=annotations,
        schema_hash=digest,
    )


def policy(**data: Any) -> PolicyConfig:
    return PolicyConfig.model_validate(data)


def binding(principal: str = "local", tenant: str = "default", **extra: Any) -> RunBinding:
    return RunBinding(run_id="run-1", principal=principal, tenant=tenant, trace_id="t", **extra)


def context(
    tool: ToolSpec | None = None, arguments: dict[str, Any] | None = None, **binding_args: Any
) -> Call:
    tool = tool or spec()
    arguments = {"customer_id": "CUST-0001"} if arguments is None else arguments
    bound = binding(**binding_args)
    request = ToolCallRequest(
        seq=1, server="crm", tool=tool.name, schema_hash=tool.schema_hash, arguments=arguments
    )
    return Call(
        binding=bound,
        run=RunState(binding=bound),
        server="crm",
        name=tool.name,
        arguments=arguments,
        now=time.time(),
        request=request,
    )


def principal_facts(rules: PolicyConfig | None = None, **facts: Any) -> Facts:
    """Facts as the principal gate leaves them (plus ``facts``)."""
    return Facts(principal=(rules or policy()).principal("local"), **facts)


class Catalog:
    def __init__(self, *tools: ToolSpec, trusted: bool = False) -> None:
        self.tools = {t.name: t for t in tools}
        self.trusted = trusted

    def live_tool(self, server: str, tool: str) -> ToolSpec | None:
        return self.tools.get(tool) if server == "crm" else None

    async def settle(self, server: str) -> None:
        return None

    def is_trusted(self, server: str) -> bool:
        return self.trusted

    def server_version(self, server: str) -> str | None:
        return None


class Pins:
    def __init__(self, *tools: ToolSpec) -> None:
        lock, _ = observe(LockFile(), ServerCatalog(server="crm", tools=tools))
        self.lock, _ = approve(lock)


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


async def test_principal_gate_refuses_a_missing_identity_and_an_expired_context() -> None:
    gate = PrincipalGate(policy())
    assert isinstance(await gate.check(context(principal=""), Facts()), Deny)
    expired = await gate.check(context(expires_at=time.time() - 1), Facts())
    assert isinstance(expired, Deny) and "expired" in expired.reason


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


# -- arguments ----------------------------------------------------------------------------------


async def arguments_decision(arguments: dict[str, Any], **policy_data: Any) -> Any:
    return await ArgumentGate(policy(**policy_data)).check(
        context(spec(), arguments), Facts(pinned={"inputSchema": SCHEMA})
    )


async def test_argument_gate_allows_valid_arguments() -> None:
    assert isinstance(await arguments_decision({"customer_id": "CUST-0001", "note": "hi"}), Allow)


async def test_argument_gate_refuses_invalid_arguments_with_the_location() -> None:
    decision = await arguments_decision({"customer_id": "nope"})
    assert isinstance(decision, Deny) and "customer_id" in decision.reason
    missing = await arguments_decision({})
    assert isinstance(missing, Deny) and "required" in missing.reason


async def test_identity_fields_smuggled_in_arguments_are_refused() -> None:
    decision = await arguments_decision(
        {"customer_id": "CUST-0001", "principal": "admin", "tenant": "globex"}
    )
    assert isinstance(decision, Deny)
    assert "'principal'" in decision.reason and "'tenant'" in decision.reason


async def test_undeclared_arguments_pass_when_strict_arguments_is_off() -> None:
    assert isinstance(
        await arguments_decision({"customer_id": "CUST-0001", "x": 1}, strict_arguments=False), Allow
    )


async def test_argument_gate_never_fetches_a_network_ref() -> None:
    schema = {"type": "object", "properties": {"customer_id": {"$ref": "https://example.invalid/s.json"}}}
    decision = await ArgumentGate(policy()).check(
        context(spec(), {"customer_id": "CUST-0001"}), Facts(pinned={"inputSchema": schema})
    )
    assert isinstance(decision, Deny)


async def test_argument_gate_refuses_oversized_and_deeply_nested_arguments() -> None:
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    decision = await arguments_decision({"customer_id": "CUST-0001", "note": deep}, strict_arguments=False)
    assert isinstance(decision, Deny) and "nested deeper" in decision.reason
    big = await arguments_decision({"customer_id": "CUST-0001", "note": "x" * 2_000_000})
    assert isinstance(big, Deny) and "bytes" in big.reason


PLAIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limit": {"type": "number", "maximum": 100},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["limit"],
}
"""No regular expression and no reference: checked by the compiled validator."""


async def plain_decision(
    gate: ArgumentGate, arguments: dict[str, Any], schema: dict[str, Any] = PLAIN_SCHEMA
) -> Any:
    return await gate.check(context(spec(), arguments), Facts(pinned={"inputSchema": schema}))


async def test_a_schema_without_patterns_or_references_is_checked_by_the_compiled_validator() -> None:
    gate = ArgumentGate(policy())
    assert isinstance(await plain_decision(gate, {"limit": 5, "tags": ["a"]}), Allow)
    (built,) = gate._validators.values()  # pyright: ignore[reportPrivateUsage]
    assert not isinstance(built, str) and built.compiled is not None
    # Refusals are worded by the interpreted validator, with the location, as for any schema.
    too_big = await plain_decision(gate, {"limit": 500})
    assert isinstance(too_big, Deny) and too_big.reason == (
        "invalid argument at limit: 500 is greater than the maximum of 100"
    )
    wrong_type = await plain_decision(gate, {"limit": 5, "tags": [1]})
    assert isinstance(wrong_type, Deny) and wrong_type.reason.startswith("invalid argument at tags/0:")
    missing = await plain_decision(gate, {})
    assert isinstance(missing, Deny) and "required" in missing.reason


async def test_a_refusal_by_the_compiled_validator_stands_when_the_interpreted_one_would_accept() -> None:
    gate = ArgumentGate(policy())
    await plain_decision(gate, {"limit": 5})
    ((key, built),) = gate._validators.items()  # pyright: ignore[reportPrivateUsage]
    assert not isinstance(built, str)
    refuses_all = jsonschema_rs.validator_for({"not": {}})
    gate._validators[key] = dataclasses.replace(built, compiled=refuses_all)  # pyright: ignore[reportPrivateUsage]
    decision = await plain_decision(gate, {"limit": 5})
    assert isinstance(decision, Deny) and "do not match the tool's schema" in decision.reason
    # NaN is not above any maximum for Python's comparisons, so only the compiled validator sees it.
    nan = await plain_decision(ArgumentGate(policy()), {"limit": float("nan")})
    assert isinstance(nan, Deny)


async def test_numbers_beyond_64_bits_are_compared_exactly() -> None:
    gate = ArgumentGate(policy())
    assert isinstance(await plain_decision(gate, {"limit": -(10**400)}), Allow)
    refused = await plain_decision(gate, {"limit": 10**400})
    assert isinstance(refused, Deny) and refused.reason.startswith("invalid argument at limit:")


async def test_a_schema_the_compiled_validator_cannot_build_is_still_enforced() -> None:
    unknown_dialect = {**PLAIN_SCHEMA, "$schema": "https://127.0.0.1/an-unknown-dialect"}
    gate = ArgumentGate(policy())
    assert isinstance(await plain_decision(gate, {"limit": 5}, unknown_dialect), Allow)
    (built,) = gate._validators.values()  # pyright: ignore[reportPrivateUsage]
    assert not isinstance(built, str) and built.compiled is None
    refused = await plain_decision(gate, {"limit": 500}, unknown_dialect)
    assert isinstance(refused, Deny) and "greater than the maximum" in refused.reason


async def test_schemas_with_patterns_or_references_are_not_compiled() -> None:
    with_reference = {
        "$defs": {"n": {"type": "number"}},
        "type": "object",
        "properties": {"limit": {"$ref": "#/$defs/n"}},
    }
    for schema, arguments in ((SCHEMA, {"customer_id": "CUST-0001"}), (with_reference, {"limit": 5})):
        gate = ArgumentGate(policy())
        assert isinstance(await plain_decision(gate, arguments, schema), Allow)
        (built,) = gate._validators.values()  # pyright: ignore[reportPrivateUsage]
        assert not isinstance(built, str) and built.compiled is None


# -- resource scope -----------------------------------------------------------------------------


def scoped(rule: dict[str, Any], arguments: dict[str, Any], *, read_only: bool = False) -> tuple[Call, Facts]:
    rules = policy(principals={"local": {"scopes": [rule]}})
    return context(spec(), arguments), principal_facts(rules, risk="low" if read_only else "high")


async def test_scope_gate_allows_record_ids_in_scope_and_refuses_others() -> None:
    rule = {"tools": ["crm/*"], "argument": "customer_id", "allow": ["CUST-00*"]}
    allowed = await ScopeGate().check(*scoped(rule, {"customer_id": "CUST-0042"}))
    assert isinstance(allowed, Allow) and allowed.facts.scope == ("customer_id=CUST-0042",)
    decision = await ScopeGate().check(*scoped(rule, {"customer_id": "CUST-0420"}))
    assert isinstance(decision, Deny) and "outside the granted scope" in decision.reason


async def test_scope_gate_refuses_a_write_where_only_read_is_granted() -> None:
    rule = {"tools": ["crm/*"], "argument": "customer_id", "allow": ["*"], "access": "read"}
    assert isinstance(await ScopeGate().check(*scoped(rule, {"customer_id": "C"}, read_only=True)), Allow)
    decision = await ScopeGate().check(*scoped(rule, {"customer_id": "C"}))
    assert isinstance(decision, Deny) and "only read access" in decision.reason


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    allowed = tmp_path / "allowed"
    (allowed / "sub").mkdir(parents=True)
    (allowed / "sub" / "file.txt").write_text("ok")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.pem").write_text("private")
    os.symlink(secret, allowed / "escape")
    return {"allowed": allowed, "secret": secret}


def test_paths_inside_the_root_are_allowed(roots: dict[str, Path]) -> None:
    ok, real = check_path(str(roots["allowed"] / "sub" / "file.txt"), [str(roots["allowed"])])
    assert ok and real.endswith("file.txt")


@pytest.mark.parametrize(
    "suffix",
    [
        "/../secret/key.pem",
        "/sub/../../secret/key.pem",
        "/%2e%2e/secret/key.pem",
        "/%252e%252e/secret/key.pem",
        "/..%2fsecret/key.pem",
        "/．．/secret/key.pem",
        "/escape/key.pem",
        "/sub/\x00/../../secret",
    ],
    ids=["dotdot", "nested-dotdot", "percent", "double-percent", "mixed", "fullwidth", "symlink", "nul"],
)
def test_path_traversal_in_every_form_is_refused(roots: dict[str, Path], suffix: str) -> None:
    ok, reason = check_path(str(roots["allowed"]) + suffix, [str(roots["allowed"])])
    assert not ok, reason


def test_relative_paths_are_refused(roots: dict[str, Path]) -> None:
    ok, reason = check_path("sub/file.txt", [str(roots["allowed"])])
    assert not ok and "absolute" in reason


# -- consent ------------------------------------------------------------------------------------


class Store:
    def __init__(self, preissued: dict[tuple[str, str], str] | None = None) -> None:
        self.preissued = dict(preissued or {})
        self.granted: list[ApprovalRequest] = []

    def consume_preissued(self, *, tool: str, args_digest: str, **_: Any) -> str | None:
        return self.preissued.pop((tool, args_digest), None)

    def record_granted(self, request: ApprovalRequest, answer: ApprovalAnswer) -> str:
        self.granted.append(request)
        return f"appr-{len(self.granted)}"


def approver(approved: bool) -> CallbackApprover:
    async def answer(_: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer(approved, "test")

    return CallbackApprover(answer)


async def consent(
    call: Call,
    *,
    rules: PolicyConfig | None = None,
    store: Store | None = None,
    answer: bool | None = None,
    risk: str = "high",
) -> Allow | Deny | NeedsApproval:
    """The consent gate, then (if it says a person must approve) the approval flow."""
    rules = rules or policy()
    store = store or Store()
    facts = principal_facts(rules, risk=risk, pinned={"inputSchema": SCHEMA})
    decision = await ConsentGate(rules, store).check(call, facts)
    if isinstance(decision, NeedsApproval) and answer is not None:
        return await ApprovalFlow(rules, store, approver(answer)).obtain(call, decision)
    return decision


async def test_low_risk_calls_need_no_consent() -> None:
    assert isinstance(await consent(context(), risk="low"), Allow)


async def test_a_risky_call_needs_approval_and_the_gate_never_asks_anyone() -> None:
    decision = await consent(context())
    assert isinstance(decision, NeedsApproval) and "high risk" in decision.why


async def test_without_an_approver_the_flow_denies_with_what_to_do() -> None:
    call = context()
    needs = await ConsentGate(policy(), Store()).check(call, principal_facts())
    assert isinstance(needs, NeedsApproval)
    decision = await ApprovalFlow(policy(), Store(), None).obtain(call, needs)
    assert isinstance(decision, Deny) and "codemode approve crm/add_note" in decision.reason


async def test_an_interactive_approval_is_bound_to_the_call_and_its_arguments() -> None:
    store = Store()
    call = context()
    decision = await consent(call, store=store, answer=True)
    assert isinstance(decision, Allow) and decision.facts.approval_id == "appr-1"
    request = store.granted[0]
    assert request.call_id == "run-1/1" and request.args_digest == arguments_digest(dict(call.arguments))


async def test_a_declined_approval_denies_the_call() -> None:
    decision = await consent(context(), answer=False)
    assert isinstance(decision, Deny) and "not given" in decision.reason


async def test_a_preissued_approval_works_once_and_only_for_its_arguments() -> None:
    call = context()
    store = Store({("add_note", arguments_digest(dict(call.arguments))): "pre-1"})
    mutated = context(arguments={"customer_id": "CUST-0002"})
    assert isinstance(await consent(mutated, store=store), NeedsApproval), "other arguments do not match"
    decision = await consent(call, store=store)
    assert isinstance(decision, Allow) and decision.facts.approval_id == "pre-1"
    assert isinstance(await consent(context(), store=store), NeedsApproval), "single use"


async def test_policy_can_require_or_waive_consent_per_tool() -> None:
    always = policy(consent={"always": ["crm/*"]})
    assert isinstance(await consent(context(), rules=always, risk="low"), NeedsApproval)
    never = policy(consent={"never": ["crm/add_note"]})
    assert isinstance(await consent(context(), rules=never), Allow)


# -- budget -------------------------------------------------------------------------------------


async def spend(gate: BudgetGate, call: Call) -> bool:
    """Check, then commit: what the broker does around consent. True when the call was allowed."""
    decision = await gate.check(call, Facts())
    return isinstance(decision, Allow) and gate.commit(call, decision.facts) is None


async def test_budget_stops_exactly_at_the_call_cap() -> None:
    gate = BudgetGate(policy(budget={"calls_per_run": 3}))
    call = context()
    assert [await spend(gate, call) for _ in range(5)] == [True, True, True, False, False]


async def test_budget_check_takes_nothing_until_commit() -> None:
    gate = BudgetGate(policy(budget={"calls_per_run": 1}))
    call = context()
    assert all([isinstance(await gate.check(call, Facts()), Allow) for _ in range(3)])
    assert call.run.calls_allowed == 0, "a call refused by consent after the check costs nothing"
    first = await gate.check(call, Facts())
    second = await gate.check(call, Facts())
    assert isinstance(first, Allow) and isinstance(second, Allow)
    assert gate.commit(call, first.facts) is None
    refused = gate.commit(call, second.facts)
    assert refused is not None and "call budget exhausted" in refused.reason, "commit checks again"


async def test_budget_caps_per_tool_and_money() -> None:
    gate = BudgetGate(policy(budget={"calls_per_tool": {"crm/add_*": 1}}))
    call = context()
    assert await spend(gate, call)
    decision = await gate.check(call, Facts())
    assert isinstance(decision, Deny) and "crm/add_note" in decision.reason
    money = BudgetGate(policy(budget={"money_per_run": 1.0, "costs": {"crm/*": 0.4}}))
    call = context()
    assert [await spend(money, call) for _ in range(3)] == [True, True, False]


async def test_the_server_gate_lets_resources_through_only_for_granted_servers() -> None:
    bound = binding()
    call = Call(
        binding=bound,
        run=RunState(binding=bound),
        server="crm",
        name="crm://x",
        arguments={},
        now=0.0,
        kind="resource",
    )
    granted = principal_facts(policy(principals={"local": {"tools": ["crm/get_*"]}}))
    assert isinstance(await ServerGate().check(call, granted), Allow)
    other = principal_facts(policy(principals={"local": {"tools": ["docs/*"]}}))
    decision = await ServerGate().check(call, other)
    assert isinstance(decision, Deny) and "may not use server 'crm'" in decision.reason


# -- batch items: derived keys, read-only runs, per-run limits -----------------------------------


async def test_a_read_only_run_refuses_every_call_not_known_to_be_read_only() -> None:
    from codemode.broker.gates import ReadOnlyRunGate

    checking = context(read_only=True)
    refused = await ReadOnlyRunGate().check(checking, principal_facts(risk="medium"))
    assert isinstance(refused, Deny) and "may only read" in refused.reason
    assert isinstance(await ReadOnlyRunGate().check(checking, principal_facts(risk="low")), Allow)
    assert isinstance(await ReadOnlyRunGate().check(context(), principal_facts(risk="high")), Allow)


def test_side_effecting_calls_of_a_keyed_run_get_stable_derived_keys() -> None:
    from codemode.broker._broker import Broker

    def keys(scope: str | None, risk: Risk, *argument_sets: dict[str, Any]) -> list[str | None]:
        bound = binding(idempotency_scope=scope)
        run = RunState(binding=bound)
        found: list[str | None] = []
        for arguments in argument_sets:
            request = ToolCallRequest(
                seq=1, server="crm", tool="add_note", schema_hash="h", arguments=arguments
            )
            call = Call(
                binding=bound,
                run=run,
                server="crm",
                name="add_note",
                arguments=arguments,
                now=0,
                request=request,
            )
            derived = Broker._with_derived_key(call, Facts(risk=risk))  # pyright: ignore[reportPrivateUsage]
            assert derived.request is not None
            found.append(derived.request.idempotency_key)
        return found

    a, b = {"customer_id": "CUST-0001"}, {"customer_id": "CUST-0002"}
    first = keys("job:j/item:1", "high", a, b, a)
    assert first == keys("job:j/item:1", "high", a, b, a), "a re-run derives the same keys in the same order"
    assert len(set(first)) == 3, "another argument or a second occurrence is another operation"
    assert all(k is not None and k.startswith("job:j/item:1/crm/add_note/") for k in first)
    assert keys("job:j/item:2", "high", a) != first[:1], "another item, another key"
    assert keys("job:j/item:1", "low", a) == [None], "reads need no key"
    assert keys(None, "high", a) == [None], "ordinary runs derive nothing"


async def test_per_run_limits_only_tighten_the_policy_budget() -> None:
    from codemode.broker._run import RunLimits

    gate = BudgetGate(policy(budget={"calls_per_run": 5}))
    call = context()
    call.run.limits = RunLimits(calls=2)
    assert [await spend(gate, call) for _ in range(3)] == [True, True, False]
    loose = context()
    loose.run.limits = RunLimits(calls=50)
    assert [await spend(gate, loose) for _ in range(6)] == [True] * 5 + [False]


def test_a_memo_works_each_answer_out_once_and_starts_over_at_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_memo, "MEMO_ENTRIES", 2)
    memo: dict[str, int] = {}
    asked: list[str] = []

    def work_out(key: str) -> int:
        asked.append(key)
        return len(key)

    assert [_memo.remembered(memo, k, lambda k=k: work_out(k)) for k in ("a", "bb", "a")] == [1, 2, 1]
    assert asked == ["a", "bb"]
    assert _memo.remembered(memo, "ccc", lambda: work_out("ccc")) == 3
    assert memo == {"ccc": 3}, "full: started over"
