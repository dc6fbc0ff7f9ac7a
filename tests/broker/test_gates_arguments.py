"""Each gate's allow and deny paths, on hand-built calls (no servers, no sandbox): the
arguments (the argument gate) and the records and paths they reach (the scope gate, ``check_path``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from codemode.broker._decisions import Allow, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker.gates import ArgumentGate, ScopeGate, check_path
from tests.broker._gate_calls import SCHEMA, context, policy, principal_facts, spec

pytestmark = pytest.mark.anyio


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
