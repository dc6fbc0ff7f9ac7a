"""Path scopes cover every path-like argument: arrays, source/destination, nested, by format."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from codemode.broker._decisions import Allow, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker._paths import path_arguments, path_like_name
from codemode.broker._run import RunState
from codemode.broker.gates import ScopeGate
from codemode.calls import RunBinding, ToolCallRequest
from codemode.config import PolicyConfig, ScopeRule

pytestmark = pytest.mark.anyio


def call(
    tmp: Path, arguments: dict[str, Any], *rules: dict[str, Any], schema: dict[str, Any] | None = None
) -> tuple[Call, Facts]:
    bound = RunBinding(run_id="r", principal="local", tenant="default", trace_id="t")
    request = ToolCallRequest(seq=1, server="fs", tool="t", schema_hash="h", arguments=arguments)
    made = Call(
        binding=bound,
        run=RunState(binding=bound),
        server="fs",
        name="t",
        arguments=arguments,
        now=time.time(),
        request=request,
    )
    principal = PolicyConfig.model_validate({"principals": {"local": {"scopes": list(rules)}}}).principals[
        "local"
    ]
    return made, Facts(principal=principal, pinned={"inputSchema": schema or {"type": "object"}}, risk="high")


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    root = tmp_path / "allowed"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    return root


def path_rule(allowed: Path, argument: str = "path") -> dict[str, Any]:
    return {"tools": ["fs/*"], "argument": argument, "kind": "path", "allow": [str(allowed)]}


async def decide(made: tuple[Call, Facts]) -> Allow | Deny:
    decision = await ScopeGate().check(*made)
    assert isinstance(decision, Allow | Deny)
    return decision


async def test_a_path_array_under_another_name_is_checked(allowed: Path) -> None:
    inside, outside = str(allowed / "a.txt"), str(allowed.parent / "outside" / "b.txt")
    ok = await decide(call(allowed, {"paths": [inside, inside]}, path_rule(allowed)))
    assert isinstance(ok, Allow)
    denied = await decide(call(allowed, {"paths": [inside, outside]}, path_rule(allowed)))
    assert isinstance(denied, Deny) and "paths" in denied.reason and "outside" in denied.reason


@pytest.mark.parametrize("escaping", ["source", "destination"])
async def test_source_and_destination_are_both_checked(allowed: Path, escaping: str) -> None:
    args = {"source": str(allowed / "a"), "destination": str(allowed / "b")}
    assert isinstance(await decide(call(allowed, args, path_rule(allowed))), Allow)
    args[escaping] = str(allowed.parent / "outside" / "x")
    denied = await decide(call(allowed, args, path_rule(allowed)))
    assert isinstance(denied, Deny) and escaping in denied.reason


async def test_nested_paths_and_schema_formats_are_found(allowed: Path) -> None:
    outside = str(allowed.parent / "outside" / "x")
    nested = {"ops": [{"from_path": str(allowed / "a"), "note": "n"}, {"to": {"path": outside}}]}
    denied = await decide(call(allowed, nested, path_rule(allowed)))
    assert isinstance(denied, Deny) and "ops[1].to.path" in denied.reason
    schema = {"type": "object", "properties": {"where": {"type": "string", "format": "path"}}}
    by_format = await decide(call(allowed, {"where": outside}, path_rule(allowed), schema=schema))
    assert isinstance(by_format, Deny) and "where" in by_format.reason


async def test_a_path_value_that_cannot_be_read_is_refused(allowed: Path) -> None:
    for value in (42, {"no": "path here"}, [str(allowed / "a"), 3]):
        denied = await decide(call(allowed, {"file": value}, path_rule(allowed)))
        assert isinstance(denied, Deny), value


async def test_a_scoped_tool_with_an_uncovered_path_is_refused(allowed: Path) -> None:
    rule = {"tools": ["fs/*"], "argument": "customer_id", "allow": ["C*"]}
    denied = await decide(call(allowed, {"customer_id": "C1", "output_file": "/etc/passwd"}, rule))
    assert isinstance(denied, Deny)
    assert "'output_file'" in denied.reason and "no path scope covers" in denied.reason
    plain = await decide(call(allowed, {"customer_id": "C1", "note": "/etc/passwd"}, rule))
    assert isinstance(plain, Allow), "only path-like arguments are paths"


async def test_explicit_arguments_list_maps_odd_names(allowed: Path) -> None:
    rule = {"tools": ["fs/*"], "arguments": ["repo", "fork"], "allow": ["org/*"]}
    assert isinstance(await decide(call(allowed, {"repo": "org/a", "fork": "org/b"}, rule)), Allow)
    denied = await decide(call(allowed, {"repo": "org/a", "fork": "evil/b"}, rule))
    assert isinstance(denied, Deny) and "fork" in denied.reason


async def test_an_unscoped_tool_is_not_affected(allowed: Path) -> None:
    rule = {"tools": ["other/*"], "argument": "path", "kind": "path", "allow": [str(allowed)]}
    assert isinstance(await decide(call(allowed, {"path": "/etc/passwd"}, rule)), Allow)


def test_a_rule_must_name_an_argument() -> None:
    with pytest.raises(ValueError, match="needs 'argument' or 'arguments'"):
        ScopeRule.model_validate({"tools": ["fs/*"], "allow": ["/x"]})
    rule = ScopeRule.model_validate(
        {"tools": ["fs/*"], "argument": "a", "arguments": ["b", "a"], "allow": ["x"]}
    )
    assert rule.argument_names == ("a", "b")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("path", True),
        ("paths", True),
        ("source", True),
        ("destination", True),
        ("outputFile", True),
        ("working_dir", True),
        ("customer_id", False),
        ("pathology_report", False),
        ("content", False),
    ],
)
def test_path_like_names(name: str, expected: bool) -> None:
    assert path_like_name(name) is expected


def test_path_arguments_reports_where_each_path_sits() -> None:
    found = path_arguments({"a": {"b": [{"path": "/x"}]}, "dest": "/y"}, {"type": "object"})
    assert {(p.where, p.top, p.values) for p in found} == {
        ("a.b[0].path", "a", ("/x",)),
        ("dest", "dest", ("/y",)),
    }
