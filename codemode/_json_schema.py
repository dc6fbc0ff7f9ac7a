"""Untrusted JSON Schemas, read safely: shared by the argument gate and the output check.

* :func:`json_objects` - every object anywhere in a schema, found without recursion (a hostile
  schema may be thousands of levels deep);
* :func:`mentions` - whether any of those objects has one of some keywords as a key;
* :func:`compiled_validator` - a ``jsonschema_rs`` validator that never fetches a reference
  (nothing over the network, no file), or None when one cannot be built;
* :class:`SchemaCheck` - the interpreted (``jsonschema``) validator of a schema, whose
  regular expressions are searched by :mod:`codemode._safe_regex` instead of Python's ``re``
  (``pattern``, ``patternProperties``, and the ``additionalProperties`` they decide), and
  whose own patterns must be ECMA-262 (the ``regex`` format of the meta-schema);
* :func:`pattern_notes` - the patterns of a schema that are not searched in this process, and
  why (for pin review).

Formats are not asserted (JSON Schema's default since 2019-09, and ``jsonschema``'s).
``jsonschema_rs`` gets the ``regex`` crate's engine, which never backtracks either (a pattern it
cannot run makes the compiled validator unavailable, not slow).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, cast

import jsonschema
import jsonschema_rs
from jsonschema import FormatChecker, validators
from jsonschema import exceptions as jsonschema_exceptions
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

from codemode._safe_regex import NeedsIsolation, PatternError, isolation_reason, regex_budget, search

__all__ = [
    "REGEX_KEYWORDS",
    "Finding",
    "NeedsIsolation",
    "Outcome",
    "PatternNote",
    "SchemaCheck",
    "SchemaError",
    "Unchecked",
    "compiled_validator",
    "json_objects",
    "mentions",
    "pattern_notes",
]

REGEX_KEYWORDS = ("pattern", "patternProperties")
"""The keywords that make a validator run a regular expression."""


def json_objects(schema: object) -> Iterator[dict[str, Any]]:
    """Every JSON object in ``schema``, itself included, in no particular order."""
    stack: list[object] = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            mapping = cast(dict[str, Any], item)
            yield mapping
            stack.extend(mapping.values())
        elif isinstance(item, list):
            stack.extend(cast(list[Any], item))


def mentions(schema: object, keywords: Collection[str]) -> bool:
    """Whether any object anywhere in ``schema`` has one of ``keywords`` as a key (conservative:
    a *property* of that name counts too)."""
    return any(keyword in mapping for mapping in json_objects(schema) for keyword in keywords)


def _never_fetch(uri: str) -> Any:
    raise ValueError(f"{uri!r} is never fetched")


def compiled_validator(schema: dict[str, Any]) -> jsonschema_rs.Validator | None:
    """A compiled validator of ``schema``, or None (an unknown draft, an invalid schema, a
    reference outside it, a pattern the linear-time engine cannot run): the caller's
    interpreted validator decides instead."""
    try:
        return jsonschema_rs.validator_for(  # pyright: ignore[reportUnknownMemberType]
            schema,
            validate_formats=False,
            retriever=_never_fetch,
            pattern_options=jsonschema_rs.RegexOptions(),
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError, TypeError):
        return None


# -- the interpreted validator, with safe regular expressions -------------------------------------


def _refuse_retrieval(uri: str) -> Any:
    # Called for any $ref that is not inside the schema: never fetch, never read files.
    raise NoSuchResource(ref=uri)


SCHEMA_REGISTRY: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # pyright: ignore[reportCallIssue]

# jsonschema's stubs leave best_match's return type open; it returns the most relevant error or None.
best_match = cast(
    Callable[[Iterable[ValidationError]], ValidationError | None],
    jsonschema_exceptions.best_match,  # pyright: ignore[reportUnknownMemberType]
)


def _descend(validator: Validator, instance: Any, schema: Any, **where: Any) -> Iterator[ValidationError]:
    # Every jsonschema validator has descend(); its protocol class leaves it out.
    return cast(Any, validator).descend(instance, schema, **where)


def _quoted(text: str) -> str:
    # A long value is cut, so that a message cut to a few hundred characters still says why.
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}… ({len(text):,} characters)"


def _pattern(validator: Validator, pattern: Any, instance: Any, _schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{_quoted(instance)} does not match {pattern!r}")


def _pattern_properties(
    validator: Validator, patterns: Any, instance: Any, _schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in cast(dict[str, Any], patterns).items():
        for key, value in cast(dict[str, Any], instance).items():
            if search(pattern, key):
                yield from _descend(validator, value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Validator, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's own keyword, with the keys ``patternProperties`` takes found by :func:`search`."""
    if not validator.is_type(instance, "object"):
        return
    properties = cast(dict[str, Any], schema).get("properties", {})
    patterns = list(cast(dict[str, Any], schema).get("patternProperties", {}))
    extras = [
        key
        for key in cast(dict[str, Any], instance)
        if key not in properties and not any(search(pattern, key) for pattern in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from _descend(validator, instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(pattern) for pattern in sorted(patterns))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


_SAFE_KEYWORDS: dict[str, Any] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


@functools.cache
def _safe_class(cls: type[Validator]) -> type[Validator]:
    """``cls`` with the keywords that run regular expressions replaced (drafts are few: cached)."""
    replaced = {name: keyword for name, keyword in _SAFE_KEYWORDS.items() if name in cls.VALIDATORS}
    return cast(type[Validator], validators.extend(cls, replaced))  # pyright: ignore[reportUnknownMemberType]


def _is_ecma_regex(instance: object) -> bool:
    if isinstance(instance, str):
        isolation_reason(instance)  # raises PatternError for a pattern no engine takes
    return True


@functools.cache
def _meta_format_checker(cls: type[Validator]) -> FormatChecker:
    """The meta-schema's format checker with ``regex`` meaning ECMA-262 (jsonschema's own
    compiles each pattern with Python's ``re``, a different dialect)."""
    meta = validators.validator_for(cls.META_SCHEMA, default=cls)
    checker = FormatChecker(formats=())
    checker.checkers = {**meta.FORMAT_CHECKER.checkers}
    checker.checks("regex", raises=PatternError)(_is_ecma_regex)
    return checker


@dataclass(frozen=True)
class Finding:
    """The first way an instance does not match its schema."""

    message: str
    path: tuple[str | int, ...]
    """Where in the instance (keys and indexes; empty: the top level)."""


@dataclass(frozen=True)
class Unchecked:
    """Why an instance could not be checked (callers refuse it)."""

    kind: Literal["timeout", "unresolvable", "error"]
    detail: str
    """A reference (unresolvable), an exception's name or a pattern's problem (error)."""


Outcome = Finding | Unchecked | None
"""What checking one instance found; None: it matches."""


class SchemaCheck:
    """One untrusted schema, ready to check instances against (see the module's list).

    Raises :class:`SchemaError` for a schema that is not valid JSON Schema."""

    def __init__(self, schema: dict[str, Any]) -> None:
        cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            # The protocol class leaves format_checker out; every jsonschema validator takes it.
            cast(Any, cls).check_schema(schema, format_checker=_meta_format_checker(cls))
        except SchemaError as exc:
            if isinstance(exc.cause, PatternError):  # say what is wrong with the pattern
                raise SchemaError(str(exc.cause)) from None
            raise
        self.schema = schema
        self.cls = cls
        self.validator = _safe_class(cls)(schema, registry=SCHEMA_REGISTRY)
        self.isolated = _isolation(schema, cls)
        """Why every check of this schema runs in the separate process; None if none must."""

    def here(self, instance: Any, *, isolated: bool = False) -> Outcome:
        """Check ``instance`` in this thread; raises :class:`NeedsIsolation` (unless
        ``isolated``: then this is the separate process) when a search must not run here."""
        with regex_budget(isolated=isolated):
            try:
                error = best_match(self.validator.iter_errors(instance))
            except Unresolvable as exc:
                return Unchecked("unresolvable", str(exc.ref))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType, reportAttributeAccessIssue]
            except PatternError as exc:
                return Unchecked("error", str(exc))
            except (RecursionError, ValueError, TypeError) as exc:
                return Unchecked("error", type(exc).__name__)
        if error is None:
            return None
        path = tuple(cast(Iterable[str | int], error.absolute_path))
        return Finding(str(error.message), path)


def _patterns(schema: object) -> Iterator[str]:
    """Every string that may be used as a pattern (conservative: values of any key ``pattern``,
    keys of any object ``patternProperties``)."""
    for mapping in json_objects(schema):
        pattern = mapping.get("pattern")
        if isinstance(pattern, str):
            yield pattern
        keyed = mapping.get("patternProperties")
        if isinstance(keyed, dict):
            yield from cast(dict[str, Any], keyed)


def _isolation(schema: dict[str, Any], cls: type[Validator]) -> str | None:
    for pattern in _patterns(schema):
        try:
            reason = isolation_reason(pattern)
        except PatternError:
            continue  # not in a place where it is a pattern: check_schema took the schema
        if reason is not None:
            return f"the pattern {pattern!r} {reason}"
    if (
        "unevaluatedProperties" in cls.VALIDATORS
        and mentions(schema, ("unevaluatedProperties",))
        and mentions(schema, ("patternProperties",))
    ):
        # jsonschema's unevaluatedProperties matches patternProperties with Python's re itself.
        return "patternProperties beside unevaluatedProperties are matched by Python's re"
    return None


@dataclass(frozen=True)
class PatternNote:
    """A pattern of a schema that RE2 does not run in this process."""

    pattern: str
    problem: str
    """What is wrong with it, in words."""
    refused: bool
    """No engine takes it (every check fails); otherwise each check of it runs in the separate
    process, by a backtracking engine, killed at the time limit."""


def pattern_notes(schema: object) -> list[PatternNote]:
    """The patterns of ``schema`` that RE2 does not run in this process (see :class:`PatternNote`)."""
    notes: list[PatternNote] = []
    for pattern in dict.fromkeys(_patterns(schema)):
        try:
            reason = isolation_reason(pattern)
        except PatternError as exc:
            notes.append(PatternNote(pattern, str(exc), refused=True))
            continue
        if reason is not None:
            notes.append(PatternNote(pattern, f"{pattern!r} {reason}", refused=False))
    return notes
