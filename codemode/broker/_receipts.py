"""Find the external receipt of a side effect in a tool result, for the execution record.

Servers report receipts in many shapes; we look for a small set of clearly named keys
(``receipt_id``, ``receipt``, ``transaction_id``, ``confirmation_id``…) in the structured content
or in JSON text content, one level deep. Guessing from arbitrary ``id`` fields would record
the wrong thing, so we do not.

A call that ran as an MCP task is the exception: the host names the task in the result's
``_meta["io.codemode/task"]`` (see :mod:`codemode.host._tasks`), and that id is the receipt
even for a failed task, because it is the server's own handle on what happened.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

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


TASK_META_KEY = "io.codemode/task"
"""Mirrors ``codemode.host._tasks.TASK_META_KEY`` (the broker does not import the host)."""


def _task_id(result: mcp_types.CallToolResult) -> str | None:
    task: Any = (result.meta or {}).get(TASK_META_KEY)
    if isinstance(task, dict):
        found = cast(dict[str, Any], task).get("taskId")
        if isinstance(found, str) and found:
            return found[:200]
    return None


def find_receipt(
    result: mcp_types.CallToolResult, content: Sequence[mcp_types.ContentBlock] | None = None
) -> str | None:
    """``content``: the result's blocks to search, when the caller has already dropped the text
    copy of the structured content (searched already, as the structured value)."""
    task_id = _task_id(result)
    if task_id is not None:
        return task_id
    if result.is_error:
        return None
    found = _from_value(result.structured_content)
    if found:
        return found
    for block in result.content if content is None else content:
        if isinstance(block, mcp_types.TextContent) and block.text.lstrip().startswith("{"):
            try:
                found = _from_value(json.loads(block.text))
            except ValueError:
                continue
            if found:
                return found
    return None
