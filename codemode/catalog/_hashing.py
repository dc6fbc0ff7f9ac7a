"""Canonical hashing of tool definitions.

The hash covers exactly the parts of a definition that change what a call means or what a
model is told: name, title, description, inputSchema, outputSchema and annotations, and, when
the tool declares one, the compensation it names in ``_meta`` (so a pin binds it, and a changed
one is a changed tool; a tool that declares none hashes as it always did). It is
computed over canonical JSON (sorted keys, no insignificant whitespace, UTF-8), so key order
or formatting on the wire never changes it, while any change of content always does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

HASH_PREFIX = "sha256:"

COMPENSATION_META_KEY = "dev.codemode/compensation"
"""The ``_meta`` key under which a server declares how to undo a tool's call:
``{"tool": "delete_note", "arguments": {"note_id": "result.note_id"}}`` (a tool of the same
server). It is the only part of ``_meta`` that is hashed and kept."""


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""Made once: ``json.dumps`` with these options builds an encoder on every call."""


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` deterministically: sorted keys, compact separators, UTF-8."""
    return _CANONICAL.encode(value).encode("utf-8")


def tool_hash(
    *,
    name: str,
    title: str | None,
    description: str | None,
    input_schema: dict[str, Any] | None,
    output_schema: dict[str, Any] | None,
    annotations: dict[str, Any] | None,
    compensation: dict[str, Any] | None = None,
) -> str:
    """Return ``"sha256:<hex>"`` over the canonical form of a tool definition.

    Absent and ``null`` are the same thing here (the wire may omit either way).
    """
    definition: dict[str, Any] = {
        "name": name,
        "title": title,
        "description": description,
        "inputSchema": input_schema,
        "outputSchema": output_schema,
        "annotations": annotations,
    }
    if compensation is not None:
        definition["_meta"] = {COMPENSATION_META_KEY: compensation}
    return definition_hash(definition)


HASHED_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
"""The parts of a tool definition (MCP wire names) that the hash covers."""


def definition_hash(definition: Mapping[str, Any]) -> str:
    """The hash of a wire-form definition (as stored in codemode.lock); missing fields count as null,
    and ``_meta`` (the declared compensation) counts only where it is there."""
    document = {field: definition.get(field) for field in HASHED_FIELDS}
    if definition.get("_meta") is not None:
        document["_meta"] = definition["_meta"]
    return HASH_PREFIX + hashlib.sha256(canonical_json(document)).hexdigest()
