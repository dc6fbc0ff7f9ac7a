"""Output-schema checks: the compiled validator accepts what conforms, a schema with regular
expressions is checked with safe ones (never by the SDK, whose check runs a server's pattern with
Python's backtracking ``re`` on the event loop), and the SDK decides the rest.

Unit tests drive :class:`OutputCheck` with a recording stand-in for the SDK's check; the tests
with a real session run a real stdio server (``raw_server.py shaped``, ``regex_server.py``)
through a real SDK session.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncGenerator, Callable
from functools import partial
from typing import Any, cast

import mcp_types
import pytest
from mcp.client.session import ClientSession

from codemode.config import config_from_mapping
from codemode.errors import CodemodeError
from codemode.host import McpHost
from codemode.host._connection import ServerConnection
from codemode.host._output_check import OutputCheck, install_output_check
from tests._regex_schemas import HOSTILE, count_separate_processes, in_key, in_property_names, in_string

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
        # Where the two validators can differ (and no regular expression runs), the SDK's decides:
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


@pytest.mark.integration
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


# -- schemas with regular expressions -------------------------------------------------------------

CATASTROPHIC = ["^([a-z]+)+$", "^(a|a)*$", "(a|aa)+$", "^(\\w+\\s?)*$"]
code_in_string = partial(in_string, field="code")
code_in_key = partial(in_key, field="code")
code_in_name = partial(in_property_names, field="code")


@pytest.fixture
def separate_processes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The results checked in a separate process (the real one), in order."""
    return count_separate_processes(monkeypatch)


@pytest.mark.parametrize("pattern", CATASTROPHIC)
@pytest.mark.parametrize(
    ("shape", "value"),
    [(code_in_string, HOSTILE), (code_in_key, {HOSTILE: 1}), (code_in_name, {HOSTILE: 1})],
    ids=["pattern", "patternProperties", "propertyNames"],
)
async def test_a_catastrophic_pattern_is_checked_at_once_and_never_by_the_sdk(
    shape: Callable[[str], dict[str, Any]], value: Any, pattern: str, separate_processes: list[Any]
) -> None:
    sdk = SdkCheck()
    check = check_with({"report": shape(pattern)}, sdk)
    with pytest.raises(RuntimeError, match=r"^Invalid structured content returned by tool report: "):
        await check("report", result({"code": value}))
    good = "aaaa" if isinstance(value, str) else {"aaaa": 1}
    await check("report", result({"code": good}))
    assert sdk.seen == [] and check.checked_safely == 1 and check.accepted == 0
    assert separate_processes == [], "RE2 runs these patterns here"


async def test_a_pattern_that_is_not_ecma_262_is_an_invalid_schema() -> None:
    sdk = SdkCheck()
    check = check_with({"report": code_in_string("(?i)abc")}, sdk)
    with pytest.raises(RuntimeError, match=r"^Invalid schema for tool report: .*unknown group syntax"):
        await check("report", result({"code": "abc"}))
    assert sdk.seen == []


async def test_the_schemas_are_read_when_used_and_an_unknown_tool_is_listed_first() -> None:
    schemas: dict[str, Any] = {}
    listings: list[str] = []

    async def relist() -> None:  # what the SDK's check does for a tool it does not know
        listings.append("listed")
        schemas["report"] = code_in_string("^([a-z]+)+$")

    sdk = SdkCheck()
    check = OutputCheck(sdk, schemas, relist)
    with pytest.raises(RuntimeError, match="Invalid structured content"):
        await check("report", result({"code": HOSTILE}))
    assert listings == ["listed"] and sdk.seen == []


async def test_the_check_of_a_session_follows_the_sdk_replacing_its_schemas() -> None:
    """A complete listing replaces the session's dictionary of schemas (not its contents)."""

    class Session:
        def __init__(self) -> None:
            self._tool_output_schemas: dict[str, Any] = {"report": SHAPE}
            self.listed = 0

        async def validate_tool_result(self, name: str, result: mcp_types.CallToolResult) -> None:
            raise AssertionError("the SDK's check must not see a schema with patterns")

        async def list_tools(self) -> None:
            self.listed += 1

    session = Session()
    check = install_output_check(cast(ClientSession, session))
    session._tool_output_schemas = {"report": code_in_string("^([a-z]+)+$")}  # pyright: ignore[reportPrivateUsage]
    with pytest.raises(RuntimeError, match="Invalid structured content"):
        await check("report", result({"code": HOSTILE}))
    assert session.listed == 0


@pytest.mark.integration
async def test_a_pattern_re2_cannot_run_is_checked_in_a_separate_process_under_the_time_limit(
    separate_processes: list[Any],
) -> None:
    sdk = SdkCheck()
    check = check_with({"report": code_in_string("^(?=[a-z])([a-z]+)+$")}, sdk)
    await check("report", result({"code": "abc"}))
    with pytest.raises(RuntimeError, match="tool report against its output schema took longer than 2 s"):
        await check("report", result({"code": "a" * 40 + "!"}))
    assert sdk.seen == [] and len(separate_processes) == 2


async def test_a_real_session_refuses_a_result_that_a_hostile_output_pattern_refuses(
    fixture_stdio: Callable[..., dict[str, Any]],
) -> None:
    """``regex_server.py`` answers ``report`` with 40 letters and a ``!`` against ``(a|aa)+$``."""
    async with McpHost(config_from_mapping({"servers": {"regex": fixture_stdio("regex_server")}})) as host:
        with pytest.raises(CodemodeError, match="Invalid structured content returned by tool report"):
            await host.call_tool("regex", "report", {})
        output_check = host.connections["regex"].output_check
        assert output_check is not None and output_check.checked_safely == 0
    fitting = fixture_stdio("regex_server", env={"REGEX_REPORT": "aaaa"})
    async with McpHost(config_from_mapping({"servers": {"regex": fitting}})) as host:
        answer = await host.call_tool("regex", "report", {})
        assert answer.structured_content == {"code": "aaaa"}
        output_check = host.connections["regex"].output_check
        assert output_check is not None and output_check.checked_safely == 1
