"""Untrusted JSON Schemas, read safely: shared by the argument gate and the output check.

* :func:`json_objects` - every object anywhere in a schema, found without recursion (a hostile
  schema may be thousands of levels deep);
* :func:`mentions` - whether any of those objects has one of some keywords as a key;
* :func:`compiled_validator` - a ``jsonschema_rs`` validator that never fetches a reference
  (nothing over the network, no file), or None when one cannot be built.

Formats are not asserted (JSON Schema's default since 2019-09, and ``jsonschema``'s).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any, cast

import jsonschema_rs

__all__ = ["compiled_validator", "json_objects", "mentions"]


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
    reference outside it): the caller's interpreted validator decides instead."""
    try:
        return jsonschema_rs.validator_for(  # pyright: ignore[reportUnknownMemberType]
            schema, validate_formats=False, retriever=_never_fetch
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError, TypeError):
        return None
