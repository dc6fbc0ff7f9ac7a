"""A tool's structured result checked against its output schema: fast when it conforms.

The SDK's ``ClientSession`` checks every structured result against the tool's output schema
with the interpreted ``jsonschema`` validator, on every call: about 15 us for a small result in
a hot loop, and more inside a real call, where the caches are cold. A compiled validator
(``jsonschema_rs``, as in the argument gate) says yes or no in well under a microsecond.

:func:`install_output_check` gives one session an :class:`OutputCheck`, which decides as follows:

===========================================  ==================================================
case                                         checked by
===========================================  ==================================================
a structured result that the compiled        nothing more: accepted
validator of the tool's listed schema
accepts
anything else: no structured result, the     the SDK's own check, unchanged, so that a refusal
compiled validator says no or cannot be      and its message are the SDK's
built, a tool the catalog does not list
===========================================  ==================================================

The schema is the one in the connection's catalog, which the tool gate compares with the pin
before a call leaves. References resolve inside the schema only (nothing is ever fetched), and
formats are not asserted: the same rules as the SDK's check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import jsonschema_rs
import mcp_types
from mcp.client.session import ClientSession

__all__ = ["OutputCheck", "install_output_check"]

SchemaLookup = Callable[[str], tuple[str, dict[str, Any]] | None]
"""Tool name -> (schema hash, output schema) from the catalog; None when it has none."""


def _never_fetch(uri: str) -> Any:
    raise ValueError(f"{uri!r} is never fetched")


def _compile(schema: dict[str, Any]) -> jsonschema_rs.Validator | None:
    try:
        return jsonschema_rs.validator_for(  # pyright: ignore[reportUnknownMemberType]
            schema, validate_formats=False, retriever=_never_fetch
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError, TypeError):
        return None  # an unknown draft, an invalid schema: the SDK's check says what it thinks


class OutputCheck:
    """Stands in for one session's ``validate_tool_result`` (see the module's table)."""

    def __init__(
        self,
        sdk_check: Callable[[str, mcp_types.CallToolResult], Awaitable[None]],
        schemas: SchemaLookup,
    ) -> None:
        self._sdk_check = sdk_check
        self._schemas = schemas
        self._compiled: dict[str, jsonschema_rs.Validator | None] = {}
        """By schema hash: a changed definition gets a validator of its own."""
        self.accepted = 0
        """Results accepted by the compiled validator alone (for tests and benchmarks)."""

    async def __call__(self, name: str, result: mcp_types.CallToolResult) -> None:
        if result.structured_content is not None and self._conforms(name, result.structured_content):
            self.accepted += 1
            return
        await self._sdk_check(name, result)

    def _conforms(self, name: str, structured: dict[str, Any]) -> bool:
        listed = self._schemas(name)
        if listed is None:
            return False
        schema_hash, schema = listed
        if schema_hash not in self._compiled:
            self._compiled[schema_hash] = _compile(schema)
        validator = self._compiled[schema_hash]
        try:
            return validator is not None and validator.is_valid(structured)
        except Exception:  # a validator that fails is no verdict: the SDK's check decides
            return False


def install_output_check(session: ClientSession, schemas: SchemaLookup) -> OutputCheck:
    """Give ``session`` the fast check; the SDK's own stays behind it for every other case."""
    check = OutputCheck(session.validate_tool_result, schemas)
    # An instance attribute shadows the method, for this session only: the SDK calls it from
    # call_tool, and codemode's task polling calls it for results that arrive later.
    vars(session)["validate_tool_result"] = check
    return check
