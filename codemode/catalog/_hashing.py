"""Canonical hashing of tool definitions.

The hash covers exactly the parts of a definition that change what a call means or what a
model is told: name, title, description, inputSchema, outputSchema and annotations. It is
computed over canonical JSON (sorted keys, no insignificant whitespace, UTF-8), so key order
or formatting on the wire never changes it, while any change of content always does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

HASH_PREFIX = "sha256:"


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
) -> str:
    """Return ``"sha256:<hex>"`` over the canonical form of a tool definition.

    Absent and ``null`` are the same thing here (the wire may omit either way).
    """
    return definition_hash(
        {
            "name": name,
            "title": title,
            "description": description,
            "inputSchema": input_schema,
            "outputSchema": output_schema,
            "annotations": annotations,
        }
    )


HASHED_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
"""The parts of a tool definition (MCP wire names) that the hash covers."""


def definition_hash(definition: Mapping[str, Any]) -> str:
    """The hash of a wire-form definition (as stored in codemode.lock); missing fields count as null."""
    document = {field: definition.get(field) for field in HASHED_FIELDS}
    return HASH_PREFIX + hashlib.sha256(canonical_json(document)).hexdigest()
