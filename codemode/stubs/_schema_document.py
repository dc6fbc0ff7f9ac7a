"""Reading an untrusted JSON Schema document: typed accessors, local ``$ref`` s, ``allOf``.

Nothing here trusts the shape of its input: every accessor returns None or an empty value for
the wrong JSON type, ``$ref`` chains and ``allOf`` trees are bounded by :data:`MAX_REF_HOPS`,
and only references inside the document (JSON pointers) are followed - nothing is fetched.
Problems are reported as short notes (see :func:`note`) that end up in the stub as comments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, cast
from urllib.parse import unquote

__all__ = [
    "MAX_REF_HOPS",
    "MISSING",
    "JsonMap",
    "SchemaDocument",
    "as_list",
    "as_map",
    "decode_pointer_token",
    "description_of",
    "is_json_scalar",
    "local_pointer",
    "note",
    "str_items",
    "variants",
]

MAX_REF_HOPS: Final = 32

JsonMap = Mapping[str, Any]


def as_map(value: object) -> JsonMap | None:
    """``value`` as a JSON object, or None. (JSON keys are strings; callers still check.)"""
    return cast(JsonMap, value) if isinstance(value, Mapping) else None


def as_list(value: object) -> list[Any] | None:
    return cast("list[Any]", value) if isinstance(value, list) else None


def str_items(value: object) -> list[str]:
    """The string members of a JSON array (``required``, a ``type`` list), else ``[]``."""
    items = as_list(value)
    return [v for v in items if isinstance(v, str)] if items is not None else []


def description_of(schema: object) -> str:
    """A schema's ``description`` (its ``title`` is usually just the prettified key: not used)."""
    mapping = as_map(schema)
    value = mapping.get("description") if mapping is not None else None
    return value if isinstance(value, str) else ""


def variants(schema: Mapping[str, Any]) -> list[object]:
    """The members of a schema's ``anyOf`` and ``oneOf`` (in that order)."""
    out: list[object] = []
    for key in ("anyOf", "oneOf"):
        out.extend(as_list(schema.get(key)) or [])
    return out


def is_json_scalar(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


def note(notes: list[str], text: str) -> None:
    """Record why something degraded; a handful of distinct notes is all a stub comment can use."""
    if text not in notes and len(notes) < 8:
        notes.append(text)


# ----------------------------------------------------------------------------- JSON pointers


def local_pointer(ref: object, notes: list[str]) -> str | None:
    """The JSON pointer of a local ``$ref`` (``"#/$defs/X"`` -> ``"/$defs/X"``), else None with a note."""
    if not isinstance(ref, str):
        note(notes, "invalid $ref: Any")
        return None
    if not ref.startswith("#"):
        note(notes, f"$ref {ref} is not fetched (only local references are followed): Any")
        return None
    pointer = ref[1:]
    if pointer and not pointer.startswith("/"):
        note(notes, f"anchor $ref {ref} is not supported: Any")
        return None
    return pointer


MISSING: Final = object()


def decode_pointer_token(token: str) -> str:
    return unquote(token).replace("~1", "/").replace("~0", "~")


class SchemaDocument:
    """One JSON document (an inputSchema or an outputSchema), navigated through its own ``$ref`` s."""

    def __init__(self, root: object) -> None:
        self.root = root
        self._found: dict[str, object] = {}
        """Pointers already looked up: a hostile schema can point thousands of times through one
        long path (the document is not changed while it is rendered)."""

    def lookup(self, pointer: str) -> object:
        """Resolve a JSON pointer (RFC 6901, URI-fragment encoded) or return :data:`MISSING`."""
        found = self._found.get(pointer, self)
        if found is self:
            found = self._found[pointer] = self._walk(pointer)
        return found

    def _walk(self, pointer: str) -> object:
        node = self.root
        if not pointer:
            return node
        for raw in pointer.split("/")[1:]:
            token = decode_pointer_token(raw)
            mapping, items = as_map(node), as_list(node)
            if mapping is not None:
                if token not in mapping:
                    return MISSING
                node = mapping[token]
            # ASCII digits only ("²" is a digit to str.isdigit, not to int), and a length no list
            # index reaches (int() refuses more than 4,300 digits).
            elif items is not None and token.isascii() and token.isdigit() and len(token) <= 9:
                index = int(token)
                if index >= len(items):
                    return MISSING
                node = items[index]
            else:
                return MISSING
        return node

    def resolve(self, schema: object) -> object:
        """``schema`` with a local ``$ref`` followed (unchanged when it has none or it fails)."""
        mapping = as_map(schema)
        if mapping is not None and "$ref" in mapping:
            target = self.resolve_ref(mapping["$ref"], [])
            return schema if target is None else target
        return schema

    def resolve_ref(self, ref: object, notes: list[str]) -> object | None:
        """Follow ``$ref`` chains inside the document; None (with a note) when that is not possible."""
        for _ in range(MAX_REF_HOPS):
            pointer = local_pointer(ref, notes)
            if pointer is None:
                return None
            target = self.lookup(pointer)
            if target is MISSING:
                note(notes, f"unresolvable $ref {ref}: Any")
                return None
            mapping = as_map(target)
            if mapping is not None and "$ref" in mapping:
                ref = mapping["$ref"]
                continue
            return target
        note(notes, "$ref chain too long: Any")
        return None

    def flatten_all_of(
        self, schema: Mapping[str, Any], notes: list[str]
    ) -> list[tuple[object, object]] | None:
        """``(as written, resolved)`` for the schema's own keywords and every allOf member, recursively."""
        out: list[tuple[object, object]] = []
        seen: set[int] = set()
        pending: list[object] = [schema]
        while pending:
            original = pending.pop(0)
            if len(out) > MAX_REF_HOPS:
                note(notes, "allOf too large: Any")
                return None
            part: object = original
            as_mapping = as_map(part)
            if as_mapping is not None and "$ref" in as_mapping:
                part = self.resolve_ref(as_mapping["$ref"], notes)
                if part is None:
                    return None
            if id(part) in seen:
                continue
            seen.add(id(part))
            mapping = as_map(part)
            members = as_list(mapping.get("allOf")) if mapping is not None else None
            if mapping is not None and members is not None:
                rest = {k: v for k, v in mapping.items() if k != "allOf"}
                out.append((rest, rest))
                pending.extend(members)
            else:
                out.append((original, part))
        return out
