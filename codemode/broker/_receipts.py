"""Find the external receipt of a side effect in a tool result, for the execution record.

Servers report receipts in many shapes; we look for a small set of clearly named keys
(``receipt_id``, ``receipt``, ``transaction_id``, ``confirmation_id``…) in the structured content
or in JSON text content, one level deep. Guessing from arbitrary ``id`` fields would record
the wrong thing, so we do not.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types

_KEYS = (
    "receipt_id",
    "receiptId",
    "receipt",
    "transaction_id",
    "transactionId",
    "confirmation_id",
    "confirmationId",
)


def _from_value(value: Any, depth: int = 0) -> str | None:
    if not isinstance(value, dict) or depth > 1:
        return None
    for key in _KEYS:
        found = value.get(key)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if isinstance(found, str | int) and str(found):
            return str(found)[:200]
    for nested in value.values():  # pyright: ignore[reportUnknownVariableType]
        found_nested = _from_value(nested, depth + 1)
        if found_nested:
            return found_nested
    return None


def find_receipt(result: mcp_types.CallToolResult) -> str | None:
    if result.is_error:
        return None
    found = _from_value(result.structured_content)
    if found:
        return found
    for block in result.content:
        if isinstance(block, mcp_types.TextContent) and block.text.lstrip().startswith("{"):
            try:
                found = _from_value(json.loads(block.text))
            except ValueError:
                continue
            if found:
                return found
    return None
