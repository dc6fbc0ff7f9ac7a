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
validator of the session's schema for the
tool accepts
a structured result against a schema with    :class:`~codemode._json_schema.SchemaCheck`, off
regular expressions (``pattern``,            the event loop: patterns searched by RE2, or in a
``patternProperties``)                       separate process killed after ``CHECK_LIMIT_S``
                                             (the SDK's check would run a server's pattern
                                             with Python's ``re``, on the event loop, for as
                                             long as it backtracks); a refusal is worded as
                                             the SDK words it
anything else: no structured result, the     the SDK's own check, unchanged, so that a refusal
compiled validator says no, a schema it      and its message are the SDK's
does not take (below), a tool the session
has no schema for
===========================================  ==================================================

The schema is the one the SDK's check would use: the session's own cache of listed output
schemas, read afresh on every call (a complete relisting replaces that cache), so a relisting
or a server that lists a tool twice cannot make the two disagree. For a tool not in it, the
tools are listed again first, as the SDK's check would.
The compiled validator only takes schemas on which the two validators cannot differ:

* no regular expression (``pattern``, ``patternProperties``, ``propertyNames``; a property of
  that name counts too): the SDK reads them as Python's ``re``, ``jsonschema_rs`` as ECMA 262,
  and some patterns only one accepts;
* no ``multipleOf`` (floating point arithmetic: ``0.3`` is no multiple of ``0.1`` to one);
* references only to JSON pointers inside the schema (nothing is ever fetched), and no loop of
  references that stays on the same value (the SDK's check recurses until it fails there).

Formats are asserted by neither. One difference is left: a value nested so deep that the SDK's
check exhausts the interpreter's recursion fails there and passes here; the channel's own depth
limit still applies to the answer on its way to the program.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final, cast
from urllib.parse import unquote

import anyio
import jsonschema_rs
import mcp_types
from mcp.client.session import ClientSession

from codemode._json_schema import (
    REGEX_KEYWORDS,
    Finding,
    SchemaCheck,
    SchemaError,
    Unchecked,
    compiled_validator,
    json_objects,
    mentions,
)
from codemode._schema_isolation import CHECK_LIMIT_S, check_off_loop

__all__ = ["OutputCheck", "install_output_check"]

_DIVERGENT: Final = frozenset(
    {"pattern", "patternProperties", "propertyNames", "multipleOf", "$dynamicRef", "$recursiveRef"}
)
_SAME_VALUE_LISTS: Final = ("allOf", "anyOf", "oneOf")
"""Keywords whose subschemas apply to the value itself, not to a part of it."""
_SAME_VALUE_ONE: Final = ("not", "if", "then", "else")


def _as_map(value: object) -> dict[str, Any] | None:
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def _pointer_target(root: Any, ref: str) -> Any:
    """The node a local ``#/...`` reference names, or None."""
    node = root
    for token in ref[2:].split("/") if ref != "#" else ():
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = cast(dict[str, Any], node).get(token)
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
        elif (
            isinstance(node, list)
            and token.isascii()
            and token.isdigit()
            and int(token) < len(cast(list[Any], node))
        ):
            node = cast(list[Any], node)[int(token)]
        else:
            return None
    return node


def _same_value_children(root: Any, node: dict[str, Any]) -> list[Any] | None:
    """The subschemas that apply to the same value as ``node``; None for a reference that is
    not a JSON pointer inside the schema."""
    children: list[Any] = []
    ref = node.get("$ref")
    if ref is not None:
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            return None
        children.append(_pointer_target(root, ref))
    for key in _SAME_VALUE_LISTS:
        members = node.get(key)
        if isinstance(members, list):
            children.extend(cast(list[Any], members))
    children.extend(node.get(key) for key in _SAME_VALUE_ONE)
    for key in ("dependentSchemas", "dependencies"):
        dependent = node.get(key)
        if isinstance(dependent, dict):
            children.extend(cast(dict[str, Any], dependent).values())
    return children


def _takes(schema: dict[str, Any]) -> bool:
    """Whether the compiled validator may stand in for the SDK's on ``schema`` (see above)."""
    return not mentions(schema, _DIVERGENT) and not _loops_on_one_value(schema)


def _loops_on_one_value(schema: dict[str, Any]) -> bool:
    """Whether following references and in-place keywords from some object of ``schema`` leads
    back to it (a depth-first search for a cycle, from each object in turn); also True for a
    reference outside the schema."""
    state: dict[int, bool] = {}  # id(node) -> on the current path (True) or done (False)
    for start in json_objects(schema):
        if id(start) in state:
            continue
        stack: list[tuple[dict[str, Any], list[Any] | None]] = [(start, None)]
        while stack:
            node, pending = stack[-1]
            if pending is None:
                if state.get(id(node)) is False:
                    stack.pop()
                    continue
                children = _same_value_children(schema, node)
                if children is None:
                    return True
                state[id(node)] = True
                stack[-1] = (node, children)
                continue
            if not pending:
                state[id(node)] = False
                stack.pop()
                continue
            child = _as_map(pending.pop())
            if child is not None:
                if state.get(id(child)) is True:
                    return True
                stack.append((child, None))
    return False


def _compile(schema: Any) -> jsonschema_rs.Validator | None:
    # None: the SDK's check says what it thinks (of an unknown draft, an invalid schema, ...).
    mapping = _as_map(schema)
    return compiled_validator(mapping) if mapping is not None and _takes(mapping) else None


def _safe_check(schema: dict[str, Any]) -> SchemaCheck | str:
    try:
        return SchemaCheck(schema)
    except SchemaError as exc:
        return str(exc.message)
    except RecursionError:
        return "nested too deeply to be checked"


class OutputCheck:
    """Stands in for one session's ``validate_tool_result`` (see the module's table)."""

    def __init__(
        self,
        sdk_check: Callable[[str, mcp_types.CallToolResult], Awaitable[None]],
        schemas: Mapping[str, Any] | None,
        relist: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self._sdk_check = sdk_check
        self._schemas = schemas
        """The session's listed output schemas by tool name, as its own check reads them."""
        self._relist = relist
        """Lists the tools again (for a tool the schemas do not know), as the SDK's check does."""
        self._compiled: dict[str, tuple[Any, jsonschema_rs.Validator | None, bool]] = {}
        """By tool: the schema object compiled (held, and compared by identity), its validator,
        and whether it has regular expressions."""
        self._checks: dict[str, tuple[Any, SchemaCheck | str]] = {}
        """By tool: a schema with regular expressions (held, compared by identity) and its check,
        or why it is not a schema."""
        self.accepted = 0
        """Results accepted by the compiled validator alone (for tests and benchmarks)."""
        self.checked_safely = 0
        """Results accepted by the check with safe regular expressions (for tests)."""

    async def __call__(self, name: str, result: mcp_types.CallToolResult) -> None:
        if self._schemas is not None and name not in self._schemas and self._relist is not None:
            await self._relist()
        schema = self._schemas.get(name) if self._schemas is not None else None
        structured = result.structured_content
        if structured is not None and schema is not None:
            _, validator, with_patterns = self._compiled_for(name, schema)
            if _conforms(validator, structured):
                self.accepted += 1
                return
            if with_patterns:
                await self._check_safely(name, schema, structured)
                self.checked_safely += 1
                return
        await self._sdk_check(name, result)

    def _compiled_for(self, name: str, schema: Any) -> tuple[Any, jsonschema_rs.Validator | None, bool]:
        known = self._compiled.get(name)
        if known is None or known[0] is not schema:  # listed again: a new schema object
            mapping = _as_map(schema)
            with_patterns = mapping is not None and mentions(mapping, REGEX_KEYWORDS)
            known = self._compiled[name] = (schema, _compile(schema), with_patterns)
        return known

    async def _check_safely(self, name: str, schema: dict[str, Any], structured: dict[str, Any]) -> None:
        """Raises as the SDK's check does when ``structured`` does not match ``schema``."""
        known = self._checks.get(name)
        if known is None or known[0] is not schema:
            # Off the event loop: checking a schema compiles its patterns (long ones take a while).
            known = self._checks[name] = (schema, await anyio.to_thread.run_sync(_safe_check, schema))
        check = known[1]
        if isinstance(check, str):
            raise RuntimeError(f"Invalid schema for tool {name}: {check}")
        outcome = await check_off_loop(check, structured, CHECK_LIMIT_S)
        if isinstance(outcome, Finding):
            raise RuntimeError(f"Invalid structured content returned by tool {name}: {outcome.message}")
        if isinstance(outcome, Unchecked):
            raise RuntimeError(_unchecked(name, outcome))


def _conforms(validator: jsonschema_rs.Validator | None, structured: dict[str, Any]) -> bool:
    try:
        return validator is not None and validator.is_valid(structured)
    except Exception:  # a validator that fails is no verdict: the SDK's check decides
        return False


def _unchecked(name: str, outcome: Unchecked) -> str:
    if outcome.kind == "timeout":
        return (
            f"Checking the structured content returned by tool {name} against its output schema "
            f"took longer than {CHECK_LIMIT_S:g} s (a pattern that backtracks?)"
        )
    if outcome.kind == "unresolvable":
        return f"Invalid schema for tool {name}: it refers to {outcome.detail!r}, which is never fetched"
    return f"The structured content returned by tool {name} could not be checked ({outcome.detail})"


class _SessionSchemas(Mapping[str, Any]):
    """The SDK's cache of listed output schemas, read afresh each time: a complete listing
    replaces the dictionary, so holding the first one would go stale."""

    def __init__(self, session: ClientSession) -> None:
        self._session = session

    def _current(self) -> dict[str, Any]:
        # Private to the SDK, hence read defensively: without it, every result goes to the
        # SDK's check, and a test notices that none is accepted fast.
        return _as_map(getattr(self._session, "_tool_output_schemas", None)) or {}

    def __getitem__(self, name: str) -> Any:
        return self._current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


def install_output_check(session: ClientSession) -> OutputCheck:
    """Give ``session`` the fast check; the SDK's own stays behind it for every other case."""
    check = OutputCheck(session.validate_tool_result, _SessionSchemas(session), session.list_tools)
    # An instance attribute shadows the method, for this session only: the SDK calls it from
    # call_tool, and codemode's task polling calls it for results that arrive later.
    vars(session)["validate_tool_result"] = check
    return check
