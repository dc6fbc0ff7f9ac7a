"""Argument gate: arguments must validate against the tool's *pinned* input schema.

JSON Schema 2020-12 (or the draft the schema names), with limits: a size and depth cap on the
arguments, a time cap on validation (a hostile ``pattern`` must not hang the broker), and no
network ``$ref`` (references are resolved inside the pinned schema only; anything else fails
closed). With ``strict_arguments`` (the default) an argument the schema does not declare is
refused, which is how fields such as ``principal`` or ``tenant`` smuggled into a call die here.

Two validators per pinned schema, both built once and cached by tool and schema hash:

=====================  =====================================================================
validator              used for
=====================  =====================================================================
compiled               every call whose schema is *inline-safe* (no regular expression, no
(``jsonschema_rs``)    reference) and whose arguments are small: a yes/no in about a
                       microsecond, on the event loop
interpreted            the message when the compiled one says no; every call of any other
(``jsonschema``)       schema, in a worker thread under the time cap; any schema the compiled
                       one cannot build (an unknown ``$schema``, say)
=====================  =====================================================================

Formats are not asserted by either (JSON Schema's default since 2019-09, and jsonschema's).
When the compiled validator refuses and the interpreted one finds nothing to say, the call is
still refused, with the compiled validator's own message: a refusal is never overturned.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import anyio
import jsonschema
import jsonschema_rs
from jsonschema import exceptions as jsonschema_exceptions
from jsonschema import validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.config import PolicyConfig

MAX_ARGUMENT_BYTES = 1_048_576
MAX_ARGUMENT_DEPTH = 64
VALIDATION_TIMEOUT_S = 2.0
INLINE_ARGUMENT_BYTES = 8_192
"""Arguments up to this size, against a schema without regular expressions and without
references (so without recursion), are validated on the event loop: that takes microseconds
and cannot blow up, so a worker thread (and its timeout) would only add latency to every call."""


def _refuse_retrieval(uri: str) -> Any:
    # Called for any $ref that is not inside the pinned schema: never fetch, never read files.
    raise NoSuchResource(ref=uri)


def _refuse_compiled_retrieval(uri: str) -> Any:
    # The compiled validator is only built for schemas without references; refuse all the same.
    raise ValueError(f"{uri!r} is never fetched")


# jsonschema's stubs leave best_match's return type open; it returns the most relevant error or None.
best_match = cast(
    Callable[[Iterable[ValidationError]], ValidationError | None],
    jsonschema_exceptions.best_match,  # pyright: ignore[reportUnknownMemberType]
)

_REGISTRY: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # pyright: ignore[reportCallIssue]


_SLOW_KEYWORDS = ("pattern", "patternProperties", "$ref", "$dynamicRef", "$recursiveRef")


def _may_be_slow(schema: Any) -> bool:
    """Whether validating against ``schema`` may take long: it runs a regular expression (a
    hostile ``pattern`` can backtrack for ever) or follows references (recursion can make the
    work grow exponentially with the depth of the arguments).

    Conservative: a *property* named ``pattern`` also counts, which only costs a worker thread.
    """
    stack: list[Any] = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if any(keyword in item for keyword in _SLOW_KEYWORDS):
                return True
            stack.extend(item.values())  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
        elif isinstance(item, list):
            stack.extend(item)  # pyright: ignore[reportUnknownArgumentType]
    return False


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of a JSON value, stopping early once past ``limit`` (iterative: no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return deepest


@dataclass(frozen=True)
class _Validators:
    """What one pinned schema is checked with (see the module's table)."""

    interpreted: Validator
    compiled: jsonschema_rs.Validator | None
    """None when the schema is not inline-safe, or the compiled validator could not be built."""


def _compile(schema: dict[str, Any]) -> jsonschema_rs.Validator | None:
    if _may_be_slow(schema):
        return None
    try:
        return jsonschema_rs.validator_for(  # pyright: ignore[reportUnknownMemberType]
            schema, validate_formats=False, retriever=_refuse_compiled_retrieval
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError, TypeError):
        return None  # the interpreted validator, in a worker thread, decides instead


class ArgumentGate:
    name = "arguments"

    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy
        self._validators: dict[str, _Validators | str] = {}

    def _validator(self, key: str, schema: dict[str, Any]) -> _Validators | str:
        """The cached validators of a pinned schema, or the reason the schema cannot be used."""
        cached = self._validators.get(key)
        if cached is not None:
            return cached
        try:
            cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            cls.check_schema(schema)
            made: _Validators | str = _Validators(cls(schema, registry=_REGISTRY), _compile(schema))
        except SchemaError as exc:
            made = f"the tool's pinned input schema is not valid JSON Schema ({exc.message})"
        self._validators[key] = made
        return made

    def _undeclared(self, schema: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return []
        extra = schema.get("additionalProperties")
        if extra is False or (
            self.policy.strict_arguments and extra is None and "patternProperties" not in schema
        ):
            return sorted(k for k in arguments if k not in properties)
        return []

    async def check(self, call: Call, facts: Facts) -> Decision:
        assert facts.pinned is not None, "the tool gate runs first"
        arguments = dict(call.arguments)
        size = len(json.dumps(arguments, ensure_ascii=False).encode())
        if size > MAX_ARGUMENT_BYTES:
            return Deny(self.name, f"arguments are {size:,} bytes (limit {MAX_ARGUMENT_BYTES:,})")
        if json_depth(arguments, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
            return Deny(self.name, f"arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels")
        schema = facts.pinned.get("inputSchema") or {"type": "object"}
        if not isinstance(schema, dict):
            return Deny(self.name, "the tool's pinned input schema is not an object")
        undeclared = self._undeclared(schema, arguments)  # pyright: ignore[reportUnknownArgumentType]
        if undeclared:
            return Deny(
                self.name,
                f"unexpected argument(s) {', '.join(map(repr, undeclared))}: not in the tool's schema",
            )
        key = f"{call.label}@{call.request.schema_hash if call.request else ''}"
        checked_by = self._validator(key, schema)  # pyright: ignore[reportUnknownArgumentType]
        if isinstance(checked_by, str):
            return Deny(self.name, checked_by)
        validator = checked_by.interpreted
        compiled = checked_by.compiled if size <= INLINE_ARGUMENT_BYTES else None
        if compiled is not None and _compiled_accepts(compiled, arguments):
            return Allow(facts)

        def first_error() -> ValidationError | str | None:
            try:
                return best_match(validator.iter_errors(arguments))
            except Unresolvable as exc:
                return f"the tool's schema refers to {exc.ref!r}, which is never fetched"
            except (RecursionError, ValueError, TypeError) as exc:
                return f"the arguments could not be validated ({type(exc).__name__})"

        error: ValidationError | str | None = None
        finished = False
        if compiled is not None:
            # Refused by the compiled validator: the interpreted one words the reason.
            error = first_error() or _compiled_reason(compiled, arguments)
            finished = True
        else:
            with anyio.move_on_after(VALIDATION_TIMEOUT_S):
                error = await anyio.to_thread.run_sync(first_error, abandon_on_cancel=True)
                finished = True
        if not finished:
            return Deny(self.name, f"validating the arguments took longer than {VALIDATION_TIMEOUT_S:g} s")
        if isinstance(error, str):
            return Deny(self.name, error)
        if error is not None:
            where = "/".join(str(p) for p in list(error.absolute_path)) or "(top level)"  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
            text = str(error.message)
            message = text if len(text) < 300 else text[:300] + "…"
            return Deny(self.name, f"invalid argument at {where}: {message}")
        return Allow(facts)


def _compiled_accepts(compiled: jsonschema_rs.Validator, arguments: dict[str, Any]) -> bool:
    try:
        return bool(compiled.is_valid(arguments))  # pyright: ignore[reportUnknownMemberType]
    except (ValueError, TypeError, OverflowError):
        return False  # a value it cannot take: the interpreted validator decides


def _compiled_reason(compiled: jsonschema_rs.Validator, arguments: dict[str, Any]) -> str:
    """Why the compiled validator refused, for when the interpreted one accepts: still a refusal."""
    try:
        for error in compiled.iter_errors(arguments):  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            return f"the arguments do not match the tool's schema: {str(error.message)[:300]}"  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    except (ValueError, TypeError, OverflowError) as exc:
        return f"the arguments could not be validated ({type(exc).__name__})"
    return "the arguments do not match the tool's schema"
