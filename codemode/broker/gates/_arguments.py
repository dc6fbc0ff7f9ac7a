"""Argument gate: arguments must validate against the tool's *pinned* input schema.

JSON Schema 2020-12 (or the draft the schema names), with limits: a size and depth cap on the
arguments, a time cap on validation, and no network ``$ref`` (references are resolved inside
the pinned schema only; anything else fails closed). A hostile ``pattern`` cannot hang the
broker: patterns are ECMA-262, searched by RE2 (which never backtracks), and one RE2 cannot run
(a look-around, a back reference) is searched in a separate process that is killed at the time
cap (see :mod:`codemode._schema_isolation`; ``codemode pin`` flags such patterns).

With ``strict_arguments`` (the default) an argument the schema does not declare is refused,
which is how fields such as ``principal`` or ``tenant`` smuggled into a call die here. That holds
at any depth: in every object the arguments hold where the schema declares ``properties``
(``query.tenant``, ``items[0].principal``), the allowed keys being the union of what the schema
and its ``allOf``/``anyOf``/``oneOf`` (…) branches declare; extras are allowed only where the
schema says so (``additionalProperties``, ``patternProperties``, ``unevaluatedProperties``). A
reference it cannot follow refuses the call (see :class:`_Strictness`).

Two validators per pinned schema, both built once and cached by tool and schema hash (with what
``strict_arguments`` allows at each place of the schema, worked out as calls reach it):

=====================  =====================================================================
validator              used for
=====================  =====================================================================
compiled               every call whose schema is *inline-safe* (no regular expression, no
(``jsonschema_rs``)    reference) and whose arguments are small: a yes/no in about a
                       microsecond, on the event loop
interpreted            the message when the compiled one says no; every call of any other
(``jsonschema``, with  schema, in a worker thread under the time cap (or a separate process,
safe patterns)         see above); any schema the compiled one cannot build (an unknown
                       ``$schema``, say)
=====================  =====================================================================

Formats are not asserted by either (JSON Schema's default since 2019-09, and jsonschema's).
When the compiled validator refuses and the interpreted one finds nothing to say, the call is
still refused, with the compiled validator's own message: a refusal is never overturned.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast
from urllib.parse import unquote

import anyio
import jsonschema_rs

from codemode._json_schema import (
    REGEX_KEYWORDS,
    Finding,
    NeedsIsolation,
    Outcome,
    SchemaCheck,
    SchemaError,
    Unchecked,
    compiled_validator,
    mentions,
)
from codemode._schema_isolation import CHECK_LIMIT_S, check_off_loop
from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker._paths import MAX_ARGUMENT_DEPTH
from codemode.config import PolicyConfig

_T = TypeVar("_T")

MAX_ARGUMENT_BYTES = 1_048_576
VALIDATION_TIMEOUT_S = CHECK_LIMIT_S
INLINE_ARGUMENT_BYTES = 8_192
"""Arguments up to this size, against a schema without regular expressions and without
references (so without recursion), are validated on the event loop: that takes microseconds
and cannot blow up, so a worker thread (and its timeout) would only add latency to every call."""


_SLOW_KEYWORDS = (*REGEX_KEYWORDS, "$ref", "$dynamicRef", "$recursiveRef")


async def _off_loop(work: Callable[[], _T]) -> tuple[bool, _T | None]:
    """``work()`` in a worker thread, abandoned after :data:`VALIDATION_TIMEOUT_S`: whether it
    finished, and its result."""
    with anyio.move_on_after(VALIDATION_TIMEOUT_S):
        return True, await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    return False, None


def _may_be_slow(schema: Any) -> bool:
    """Whether validating against ``schema`` may take long: it runs a regular expression (RE2's
    work grows with the text, and some patterns go to a separate process) or follows references
    (recursion can make the work grow exponentially with the depth of the arguments).

    Conservative: a *property* named ``pattern`` also counts, which only costs a worker thread.
    """
    return mentions(schema, _SLOW_KEYWORDS)


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

    interpreted: SchemaCheck
    compiled: jsonschema_rs.Validator | None
    """None when the schema is not inline-safe, or the compiled validator could not be built."""
    strictness: _Strictness | None
    """The undeclared-key check (``strict_arguments``); None when the policy turns it off."""


def _compile(schema: dict[str, Any]) -> jsonschema_rs.Validator | None:
    # None: the interpreted validator, in a worker thread, decides instead.
    return None if _may_be_slow(schema) else compiled_validator(schema)


class ArgumentGate:
    name = "arguments"

    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy
        self._validators: dict[str, _Validators | str] = {}

    async def _validator(self, key: str, schema: dict[str, Any]) -> _Validators | str:
        """The cached validators of a pinned schema, or the reason the schema cannot be used."""
        cached = self._validators.get(key)
        if cached is None:
            # In a worker thread: checking a schema compiles its patterns, and a long pattern
            # takes a while (a second for a few hundred kilobytes) that the event loop must not wait.
            cached = await anyio.to_thread.run_sync(self._build, schema)
            self._validators[key] = cached
        return cached

    def _build(self, schema: dict[str, Any]) -> _Validators | str:
        try:
            interpreted = SchemaCheck(schema)
            strictness = (
                _Strictness(schema, frozenset(interpreted.cls.VALIDATORS))
                if self.policy.strict_arguments
                else None
            )
            return _Validators(interpreted, _compile(schema), strictness)
        except SchemaError as exc:
            return f"the tool's pinned input schema is not valid JSON Schema ({exc.message})"
        except RecursionError:
            return "the tool's pinned input schema is nested too deeply to be checked"

    async def _undeclared(
        self, checked_by: _Validators, schema: dict[str, Any], arguments: dict[str, Any], size: int
    ) -> Deny | None:
        if checked_by.strictness is not None:
            undeclared: list[str] | str | None = None
            if size <= INLINE_ARGUMENT_BYTES:
                undeclared = checked_by.strictness.undeclared(arguments)
            else:
                # The walk is linear in the arguments, but a megabyte of them is not microseconds:
                # off the event loop, like their validation.
                _, undeclared = await _off_loop(partial(checked_by.strictness.undeclared, arguments))
            if undeclared is None:
                return Deny(
                    self.name,
                    f"checking for undeclared arguments took longer than {VALIDATION_TIMEOUT_S:g} s",
                )
            if isinstance(undeclared, str):
                return Deny(
                    self.name,
                    f"the tool's schema cannot be checked for undeclared arguments: it {undeclared}",
                )
        else:
            # strict_arguments off: only what the schema itself closes at the top, said plainly.
            properties = schema.get("properties")
            closed = isinstance(properties, dict) and schema.get("additionalProperties") is False
            undeclared = (
                sorted(k for k in arguments if k not in cast(dict[str, Any], properties)) if closed else []
            )
        if undeclared:
            return Deny(
                self.name,
                f"unexpected argument(s) {', '.join(map(repr, undeclared))}: not in the tool's schema",
            )
        return None

    async def check(self, call: Call, facts: Facts) -> Decision:
        assert facts.pinned is not None, "the tool gate runs first"
        arguments = dict(call.arguments)
        # surrogatepass: a lone surrogate (valid in a JSON string) has a size too, not an error.
        size = len(json.dumps(arguments, ensure_ascii=False).encode(errors="surrogatepass"))
        if size > MAX_ARGUMENT_BYTES:
            return Deny(self.name, f"arguments are {size:,} bytes (limit {MAX_ARGUMENT_BYTES:,})")
        if json_depth(arguments, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
            return Deny(self.name, f"arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels")
        schema = facts.pinned.get("inputSchema") or {"type": "object"}
        if not isinstance(schema, dict):
            return Deny(self.name, "the tool's pinned input schema is not an object")
        key = f"{call.label}@{call.request.schema_hash if call.request else ''}"
        checked_by = await self._validator(key, schema)  # pyright: ignore[reportUnknownArgumentType]
        if isinstance(checked_by, str):
            return Deny(self.name, checked_by)
        refused = await self._undeclared(checked_by, schema, arguments, size)  # pyright: ignore[reportUnknownArgumentType]
        if refused is not None:
            return refused
        interpreted = checked_by.interpreted
        compiled = checked_by.compiled if size <= INLINE_ARGUMENT_BYTES else None
        if compiled is not None and _compiled_accepts(compiled, arguments):
            return Allow(facts)
        outcome: Outcome | str = None
        if compiled is not None:
            # Refused by the compiled validator (so no regular expression, no reference): the
            # interpreted one words the reason, here; a refusal is never overturned.
            try:
                outcome = interpreted.here(arguments) or _compiled_reason(compiled, arguments)
            except NeedsIsolation:
                compiled = None
        if compiled is None:
            outcome = await check_off_loop(interpreted, arguments, VALIDATION_TIMEOUT_S)
        refusal = _refusal(outcome)
        return Allow(facts) if refusal is None else Deny(self.name, refusal)


def _refusal(outcome: Outcome | str) -> str | None:
    """Why the arguments are refused, worded for the model; None when they match."""
    if outcome is None or isinstance(outcome, str):
        return outcome
    if isinstance(outcome, Finding):
        where = "/".join(map(str, outcome.path)) or "(top level)"
        text = outcome.message
        message = text if len(text) < 300 else text[:300] + "…"
        return f"invalid argument at {where}: {message}"
    return _unchecked(outcome)


def _unchecked(outcome: Unchecked) -> str:
    if outcome.kind == "timeout":
        return f"validating the arguments took longer than {VALIDATION_TIMEOUT_S:g} s"
    if outcome.kind == "unresolvable":
        return f"the tool's schema refers to {outcome.detail!r}, which is never fetched"
    return f"the arguments could not be validated ({outcome.detail})"


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


# -- strict_arguments ----------------------------------------------------------------------------

_MAX_LEVELS = 4_096
"""Places of one schema whose allowed keys are remembered (more are worked out on every call)."""


@dataclass(frozen=True)
class _Level:
    """What one place of a schema allows, merged over the place and every branch it is made of."""

    declared: frozenset[str] | None
    """The keys an object here may have; None when any key may (nothing declared, or extras
    allowed on purpose by ``additionalProperties``, ``patternProperties`` or
    ``unevaluatedProperties``)."""
    properties: dict[str, tuple[Any, ...]]
    """The sub-schemas of each declared key."""
    patterned: tuple[Any, ...]
    """``patternProperties`` sub-schemas: any key may match one, so each key's value is checked
    against all of them (more keys allowed, never fewer, and no regular expression is run)."""
    additional: tuple[Any, ...]
    """Sub-schemas of keys not declared (``additionalProperties``, ``unevaluatedProperties``)."""
    prefix: tuple[tuple[Any, ...], ...]
    """Sub-schemas of an array's first elements (``prefixItems``, or ``items`` as a list)."""
    items: tuple[Any, ...]
    """Sub-schemas of every other element (``items``, ``additionalItems``, ``unevaluatedItems``)."""
    trivial: bool = False
    """Nothing to check here or below (any key, no sub-schema): the walk stops."""

    def key(self, name: str) -> tuple[Any, ...]:
        declared = self.properties.get(name)
        return (declared if declared is not None else self.additional) + self.patterned

    def element(self, index: int) -> tuple[Any, ...]:
        return (self.prefix[index] if index < len(self.prefix) else ()) + self.items


def _schemas(value: Any) -> list[Any]:
    return list(cast(list[Any], value)) if isinstance(value, list) else []


def _object(value: Any) -> dict[str, Any] | None:
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def _container(value: Any) -> bool:
    return isinstance(value, dict | list)


class _Strictness:
    """``strict_arguments`` for one pinned schema: every object the arguments hold where the
    schema declares ``properties`` may have only keys that some branch declares (the union over
    ``allOf``/``anyOf``/``oneOf``, ``if``/``then``/``else`` and ``dependentSchemas``, following
    ``$ref`` inside the schema), at any depth, in arrays too.

    What each place allows is worked out once (when a call first reaches it) and remembered, so
    a call costs one dictionary look-up per key it sends. A part of the schema this cannot follow
    (``$dynamicRef``, a ``$ref`` that is not a JSON pointer into the schema itself) refuses the
    calls that reach it: fail closed."""

    def __init__(self, schema: dict[str, Any], known: frozenset[str]) -> None:
        self._schema = schema
        self._known = known
        """The keywords of the schema's draft (its validator's): others are ignored by the
        validator, so they declare nothing here either (``dependencies`` in 2020-12, say)."""
        self._ref_alone = not known & {"$dynamicRef", "$recursiveRef"}
        """Drafts up to 7: a ``$ref`` makes the validator ignore every keyword beside it."""
        self._levels: dict[tuple[int, ...], _Level | str] = {}
        # An embedded ``$id`` moves what a ``#/…`` reference below it means: not followed.
        self._embedded_ids = _has_embedded_id(schema)

    def undeclared(self, arguments: dict[str, Any]) -> list[str] | str:
        """Where the arguments hold undeclared keys (``query.tenant``), or why they cannot be checked."""
        found: list[str] = []
        stack: list[tuple[str, tuple[Any, ...], Any]] = [("", (self._schema,), arguments)]
        while stack:
            where, nodes, value = stack.pop()
            level = self._level(nodes)
            if isinstance(level, str):
                return level
            if level.trivial:
                continue
            if isinstance(value, dict):
                mapping = cast(dict[str, Any], value)
                if level.declared is not None:
                    found.extend(f"{where}{name}" for name in mapping if name not in level.declared)
                for name, item in mapping.items():
                    if _container(item) and (inner := level.key(name)):
                        stack.append((f"{where}{name}.", inner, item))
            elif isinstance(value, list):
                for index, item in enumerate(cast(list[Any], value)):
                    if _container(item) and (inner := level.element(index)):
                        stack.append((f"{where.removesuffix('.')}[{index}].", inner, item))
        return sorted(found)

    def _level(self, nodes: tuple[Any, ...]) -> _Level | str:
        key = tuple(map(id, nodes))
        level = self._levels.get(key)
        if level is None:
            level = self._merge(nodes)
            if len(self._levels) < _MAX_LEVELS:
                self._levels[key] = level
        return level

    def _branches(self, nodes: tuple[Any, ...]) -> list[dict[str, Any]] | str:
        """The schemas that apply to one value: ``nodes`` and everything they are composed of."""
        out: list[dict[str, Any]] = []
        seen: set[int] = set()
        pending = list(nodes)
        while pending:
            branch = _object(pending.pop())
            if branch is None or id(branch) in seen:
                continue  # ``true``/``false`` declare nothing; a cycle adds nothing new
            seen.add(id(branch))
            for keyword in ("$dynamicRef", "$recursiveRef"):
                if keyword in branch:
                    return f"uses {keyword}, which strict_arguments does not follow"
            if "$ref" in branch:
                target = self._resolve(branch["$ref"])
                if isinstance(target, str):
                    return target
                pending.append(target[0])
                if self._ref_alone:
                    continue
            out.append(branch)
            known = self._known
            for keyword in ("allOf", "anyOf", "oneOf"):
                if keyword in known:
                    pending.extend(_schemas(branch.get(keyword)))
            if "if" in known:
                pending.extend(branch[keyword] for keyword in ("if", "then", "else") if keyword in branch)
            for keyword in ("dependentSchemas", "dependencies"):
                conditional = branch.get(keyword) if keyword in known else None
                if isinstance(conditional, dict):
                    pending.extend(cast(dict[str, Any], conditional).values())
        return out

    def _resolve(self, ref: Any) -> tuple[Any] | str:
        """The schema a ``$ref`` names (as a 1-tuple), or why it is not followed."""
        refused = f"refers to {ref!r}, which strict_arguments does not follow"
        # A JSON pointer only: "#name" names an $anchor, which the validator finds by a search
        # this walk does not repeat (read as a pointer, it could name another, stricter schema).
        if (
            not isinstance(ref, str)
            or not (ref == "#" or ref.startswith("#/"))
            or (self._embedded_ids and ref != "#")
        ):
            return refused
        target: Any = self._schema
        previous = ""
        # Every token counts, empty ones too ("#//x" is schema[""]["x"] to the validators, RFC 6901).
        for token in unquote(ref[2:]).split("/") if ref != "#" else ():
            token = token.replace("~1", "/").replace("~0", "~")
            if token in _DATA_KEYWORDS and previous not in _SCHEMA_MAPS:
                return refused  # into an instance, where the embedded-id search does not look
            previous = token
            if isinstance(target, dict) and token in target:
                target = cast(dict[str, Any], target)[token]
            elif (
                isinstance(target, list)
                and token.isascii()  # str.isdigit() also takes "²", which int() refuses
                and token.isdigit()
                and int(token) < len(cast(list[Any], target))
            ):
                target = cast(list[Any], target)[int(token)]
            else:
                return refused
        return (target,)

    def _merge(self, nodes: tuple[Any, ...]) -> _Level | str:
        branches = self._branches(nodes)
        if isinstance(branches, str):
            return branches
        properties: dict[str, list[Any]] = {}
        patterned: list[Any] = []
        additional: list[Any] = []
        prefix: list[list[Any]] = []
        items: list[Any] = []
        declares, open_ = False, False
        known = self._known
        for branch in branches:
            declared = branch.get("properties")
            if declared is not None:
                if not isinstance(declared, dict):
                    return "has 'properties' that is not an object"
                declares = True
                for name, sub in cast(dict[str, Any], declared).items():
                    properties.setdefault(name, []).append(sub)
            for keyword in ("additionalProperties", "unevaluatedProperties"):
                extra = branch.get(keyword) if keyword in known else None
                if extra is not None and extra is not False:
                    open_ = True  # the schema lets other keys through on purpose
                    additional.append(extra)
            if "patternProperties" in branch:
                open_ = True
                pattern = branch["patternProperties"]
                patterned.extend(cast(dict[str, Any], pattern).values() if isinstance(pattern, dict) else ())
            tuple_items = branch.get("prefixItems" if "prefixItems" in known else "items")
            for index, sub in enumerate(_schemas(tuple_items)):
                prefix.extend([] for _ in range(index + 1 - len(prefix)))
                prefix[index].append(sub)
            items.extend(
                branch[k]
                for k in ("items", "additionalItems", "unevaluatedItems")
                if k in branch and k in known
            )
        level = _Level(
            declared=frozenset(properties) if declares and not open_ else None,
            properties={name: _dedup(subs) for name, subs in properties.items()},
            patterned=_dedup(patterned),
            additional=_dedup(additional),
            prefix=tuple(_dedup(subs) for subs in prefix),
            items=_dedup([sub for sub in items if not isinstance(sub, list)]),
        )
        checks = level.declared is not None or any(
            (level.properties, level.patterned, level.additional, level.prefix, level.items)
        )
        return level if checks else dataclasses.replace(level, trivial=True)


_ID_KEYWORD_DIALECTS = re.compile(r"draft-0[0-4]\b")
"""Drafts 3 and 4 set a base URI with ``id`` (no ``$``), which later drafts ignore."""


_DATA_KEYWORDS = frozenset({"default", "enum", "const", "examples", "example"})
"""Keywords whose values are instances, not schemas: an ``id`` in them sets no base URI."""
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies"}
)
"""Keywords whose values map names to schemas: a property called ``$id`` sets no base URI."""


def _has_embedded_id(schema: dict[str, Any]) -> bool:
    """Whether a base URI is set below the root: ``$id``, or, in a draft-04 or older schema,
    ``id`` with a string value. Cautious: every value below a schema object is read as a possible
    schema (unknown keywords included) except instances (``default``, ``enum`` …), and the values,
    not the names, of a map of schemas (``properties`` …)."""
    dialect = schema.get("$schema")
    old = isinstance(dialect, str) and _ID_KEYWORD_DIALECTS.search(dialect) is not None
    stack: list[Any] = list(_below(schema))
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)  # pyright: ignore[reportUnknownArgumentType]
        elif isinstance(item, dict):
            node: dict[str, Any] = item  # pyright: ignore[reportUnknownVariableType]
            if "$id" in node or (old and isinstance(node.get("id"), str)):
                return True
            stack.extend(_below(node))
    return False


def _below(node: dict[str, Any]) -> list[Any]:
    """The values inside one schema object that may be (or hold) schemas."""
    found: list[Any] = []
    for key, value in node.items():
        if key in _DATA_KEYWORDS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            found.extend(value.values())  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
        else:
            found.append(value)
    return found


def _dedup(schemas: list[Any]) -> tuple[Any, ...]:
    """Sub-schemas that can constrain something (objects), each once, in a stable order."""
    unique = {id(sub): sub for sub in map(_object, schemas) if sub is not None}
    return tuple(unique[key] for key in sorted(unique))
