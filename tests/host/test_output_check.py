"""Output-schema checks: the compiled validator accepts what conforms, the SDK decides the rest.

Unit tests drive :class:`OutputCheck` with a recording stand-in for the SDK's check; the last two
run a real stdio server (``raw_server.py shaped``) through a real SDK session.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncGenerator, Callable
from typing import Any

import mcp_types
import pytest

from codemode.config import config_from_mapping
from codemode.errors import CodemodeError
from codemode.host import McpHost
from codemode.host._connection import ServerConnection
from codemode.host._output_check import OutputCheck

pytestmark = pytest.mark.anyio

SHAPE: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


class SdkCheck:
    """Records what reaches the SDK's check, and refuses like it when told to."""

    def __init__(self, refuse: bool = False) -> None:
        self.seen: list[str] = []
        self.refuse = refuse

    async def __call__(self, name: str, result: mcp_types.CallToolResult) -> None:
        self.seen.append(name)
        if self.refuse:
            raise RuntimeError(f"Invalid structured content returned by tool {name}")


def result(structured: dict[str, Any] | None) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=[], structured_content=structured)


def check_with(schemas: dict[str, Any], sdk: SdkCheck) -> OutputCheck:
    return OutputCheck(sdk, schemas)


async def test_a_conforming_result_is_accepted_without_the_sdks_check() -> None:
    sdk = SdkCheck(refuse=True)
    check = check_with({"count": SHAPE}, sdk)
    await check("count", result({"n": 3}))
    assert sdk.seen == [] and check.accepted == 1


async def test_a_result_that_does_not_conform_goes_to_the_sdks_check_which_refuses_it() -> None:
    sdk = SdkCheck(refuse=True)
    check = check_with({"count": SHAPE}, sdk)
    with pytest.raises(RuntimeError, match="Invalid structured content returned by tool count"):
        await check("count", result({"n": "three"}))
    assert sdk.seen == ["count"] and check.accepted == 0


def with_shape(**keywords: Any) -> dict[str, Any]:
    return {**SHAPE, **keywords}


LOOPS_ON_ONE_VALUE: dict[str, dict[str, Any]] = {
    "to-itself": {"$ref": "#"},
    "a-part-to-itself": {
        "$defs": {"a": {"$ref": "#/$defs/a"}},
        "type": "object",
        "properties": {"n": {"$ref": "#/$defs/a"}},
    },
    "through-defs": {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
        "$ref": "#/$defs/a",
    },
    "in-any-of": {
        "$defs": {"a": {"anyOf": [{"type": "object"}, {"$ref": "#/$defs/a"}]}},
        "$ref": "#/$defs/a",
    },
}


@pytest.mark.parametrize(
    ("schemas", "structured"),
    [
        ({"count": SHAPE}, None),  # no structured content: the SDK says whether that is allowed
        ({}, {"n": 3}),  # a tool the session has no output schema for
        ({"count": {"type": 12}}, {"n": 3}),  # not a schema the compiled validator can build
        ({"count": with_shape(**{"$schema": "https://example.invalid/no-such-draft"})}, {"n": 3}),
        # Where the two validators can differ, the SDK's alone decides:
        ({"count": with_shape(properties={"n": {"type": "string", "pattern": "^\\p{L}+$"}})}, {"n": "x"}),
        ({"count": with_shape(patternProperties={"^n$": {"type": "integer"}})}, {"n": 3}),
        ({"count": with_shape(propertyNames={"maxLength": 3})}, {"n": 3}),
        ({"count": with_shape(properties={"n": {"type": "number", "multipleOf": 0.1}})}, {"n": 0.3}),
        *(({"count": schema}, {"n": 3}) for schema in LOOPS_ON_ONE_VALUE.values()),
        ({"count": {"$defs": {"a": SHAPE}, "$ref": "#a"}}, {"n": 3}),  # not a JSON pointer
        ({"count": with_shape(**{"allOf": [SHAPE], "not": {"$ref": "#/allOf/²"}})}, {"n": 3}),  # no index
    ],
    ids=[
        "no-structured-content",
        "not-listed",
        "invalid-schema",
        "unknown-draft",
        "pattern",
        "pattern-properties",
        "property-names",
        "multiple-of",
        *(f"loop-{name}" for name in LOOPS_ON_ONE_VALUE),
        "anchor-reference",
        "pointer-with-a-non-ascii-digit",
    ],
)
async def test_every_other_case_is_left_to_the_sdks_check(
    schemas: dict[str, Any], structured: dict[str, Any] | None
) -> None:
    sdk = SdkCheck()
    check = check_with(schemas, sdk)
    await check("count", result(structured))
    assert sdk.seen == ["count"] and check.accepted == 0


async def test_a_reference_outside_the_schema_is_never_fetched() -> None:
    """A hostile schema points at a listener of this test's own: nothing may connect to it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        remote = {"$ref": f"http://127.0.0.1:{port}/shape.json"}
        sdk = SdkCheck()
        check = check_with({"count": remote}, sdk)
        await check("count", result({"n": 3}))
        with pytest.raises(TimeoutError):
            listener.accept()
    assert sdk.seen == ["count"] and check.accepted == 0


async def test_references_inside_the_schema_are_followed_also_when_they_recurse_into_parts() -> None:
    node = {"type": "object", "properties": {"n": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}}}
    schema = {"$defs": {"node": {**node, "required": ["n"]}}, "$ref": "#/$defs/node"}
    sdk = SdkCheck(refuse=True)
    check = check_with({"count": schema}, sdk)
    await check("count", result({"n": 3, "next": {"n": 4, "next": {"n": 5}}}))
    with pytest.raises(RuntimeError):
        await check("count", result({"n": 3, "next": {"n": "four"}}))
    assert check.accepted == 1


async def test_a_changed_definition_gets_a_validator_of_its_own() -> None:
    """A relisting replaces the session's schema object; the check compiles the new one."""
    schemas: dict[str, Any] = {"count": SHAPE}
    sdk = SdkCheck(refuse=True)
    check = check_with(schemas, sdk)
    await check("count", result({"n": 3}))
    schemas["count"] = {"type": "object", "properties": {"n": {"type": "string"}}, "required": ["n"]}
    with pytest.raises(RuntimeError):
        await check("count", result({"n": 3}))
    await check("count", result({"n": "three"}))
    assert check.accepted == 2


@contextlib.asynccontextmanager
async def shaped_server(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> AsyncGenerator[tuple[McpHost, ServerConnection]]:
    """A host connected to ``raw_server.py shaped``: tools fits, misfits and bare."""
    server = fixture_stdio("raw_server", "shaped", protocol="legacy")
    async with McpHost(config_from_mapping({"servers": {"raw": server}})) as host:
        yield host, host.connections["raw"]


async def test_a_real_session_accepts_fitting_results_fast_and_the_sdk_refuses_the_others(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    async with shaped_server(fixture_stdio) as (host, connection):
        answer = await host.call_tool("raw", "fits", {})
        assert answer.structured_content == {"n": 1}
        assert connection.output_check is not None and connection.output_check.accepted == 1
        with pytest.raises(CodemodeError, match="Invalid structured content returned by tool misfits"):
            await host.call_tool("raw", "misfits", {})
        with pytest.raises(CodemodeError, match="did not return structured content"):
            await host.call_tool("raw", "bare", {})
        assert connection.output_check.accepted == 1
        assert (await host.call_tool("raw", "fits", {})).structured_content == {"n": 1}
        assert connection.output_check.accepted == 2


async def test_a_catalog_lookup_by_name_follows_a_new_catalog(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    async with shaped_server(fixture_stdio) as (_, connection):
        first = connection.tool("fits")
        assert first is not None and first.output_schema is not None
        assert connection.tool("no_such_tool") is None
        relisted = await connection.refresh_catalog()
        assert connection.tool("fits") is relisted.tool("fits")
