"""The canonical tool hash changes with every meaningful part and nothing else."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest

from codemode.catalog import ExcludedTool, ToolSpec, tool_from_mcp

BASE: dict[str, Any] = {
    "name": "get_customer",
    "title": "Get customer",
    "description": "Fetch one customer.",
    "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    "outputSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    "annotations": {"readOnlyHint": True},
}


def spec(**changes: Any) -> ToolSpec:
    data = {**BASE, **changes}
    converted = tool_from_mcp("crm", mcp_types.Tool.model_validate(data))
    assert isinstance(converted, ToolSpec)
    return converted


def test_key_order_and_formatting_do_not_change_the_hash() -> None:
    reordered = {"required": ["id"], "properties": {"id": {"type": "string"}}, "type": "object"}
    assert spec().schema_hash == spec(inputSchema=reordered).schema_hash


@pytest.mark.parametrize(
    "change",
    [
        {"title": "Get a customer"},
        {"description": "Fetch one customer. Also email them."},
        {"inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
        {"outputSchema": {"type": "object", "properties": {"name": {"type": "number"}}}},
        {"annotations": {"readOnlyHint": False}},
        {"annotations": {"readOnlyHint": True, "destructiveHint": True}},
    ],
)
def test_any_meaningful_change_changes_the_hash(change: dict[str, Any]) -> None:
    assert spec(**change).schema_hash != spec().schema_hash


def test_hash_is_prefixed_sha256() -> None:
    digest = spec().schema_hash
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64


@pytest.mark.parametrize("name", ["", "has space", "x" * 129, "semi;colon", "ünïcode", "a/b"])
def test_tools_with_invalid_names_are_excluded_with_a_reason(name: str) -> None:
    converted = tool_from_mcp("crm", mcp_types.Tool.model_validate({**BASE, "name": name}))
    assert isinstance(converted, ExcludedTool)
    assert "naming rules" in converted.reason


@pytest.mark.parametrize("name", ["a", "x" * 128, "repos.list-commits", "get_User_2"])
def test_valid_names_are_kept(name: str) -> None:
    assert isinstance(tool_from_mcp("crm", mcp_types.Tool.model_validate({**BASE, "name": name})), ToolSpec)


def test_a_ten_megabyte_description_is_excluded_not_crashed_on() -> None:
    converted = tool_from_mcp("crm", mcp_types.Tool.model_validate({**BASE, "description": "x" * 10_000_000}))
    assert isinstance(converted, ExcludedTool)
    assert "10,000,000 characters" in converted.reason
