"""Turn the SDK's listing models into catalog values, excluding what is unsafe to expose.

Server metadata is untrusted input. A tool whose name breaks the MCP naming rules, whose
definition cannot be canonicalised, or whose description or definition is absurdly large is
*excluded* with a reason: it never reaches the stubs, the search index or the broker, and the
rest of the server stays usable.
"""

from __future__ import annotations

import re
from typing import Any, cast

import mcp_types

from codemode.catalog._hashing import COMPENSATION_META_KEY, canonical_json, tool_hash
from codemode.catalog._model import (
    ExcludedTool,
    PromptArgumentSpec,
    PromptSpec,
    ResourceSpec,
    ResourceTemplateSpec,
    ToolSpec,
)

# The MCP spec's tool naming rule: 1-128 characters of ASCII letters, digits, '_', '-' and '.'.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")

MAX_DESCRIPTION_CHARS = 65_536
"""Longer descriptions are excluded: no honest tool needs more, and it would flood every prompt."""

MAX_DEFINITION_BYTES = 1_048_576
"""Cap on a whole tool definition in canonical JSON (schemas included)."""

MAX_COMPENSATION_BYTES = 4096
"""A declared compensation names one tool and a few argument sources; more is not one."""


def is_valid_tool_name(name: str) -> bool:
    return _TOOL_NAME.fullmatch(name) is not None


def _shorten(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _declared_compensation(meta: Any) -> dict[str, Any] | None:
    """The compensation a tool's ``_meta`` declares, kept as declared when it is a small object
    (it is checked where it is used); anything else there is ignored, as the rest of ``_meta`` is."""
    if not isinstance(meta, dict):
        return None
    declared = cast(dict[str, Any], meta).get(COMPENSATION_META_KEY)
    if not isinstance(declared, dict):
        return None
    try:
        fits = len(canonical_json(declared)) <= MAX_COMPENSATION_BYTES
    except (TypeError, ValueError):
        return None
    return cast(dict[str, Any], declared) if fits else None


def tool_from_mcp(server: str, tool: mcp_types.Tool) -> ToolSpec | ExcludedTool:
    """Convert one listed tool, or explain why it is excluded."""
    name = tool.name
    if not is_valid_tool_name(name):
        return ExcludedTool(
            server=server,
            name=_shorten(name),
            reason="name breaks the MCP naming rules (1-128 characters of A-Z a-z 0-9 _ - .)",
        )
    description = tool.description
    if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
        return ExcludedTool(
            server=server,
            name=name,
            reason=f"description is {len(description):,} characters (limit {MAX_DESCRIPTION_CHARS:,})",
        )
    input_schema: dict[str, Any] = dict(tool.input_schema)
    output_schema: dict[str, Any] | None = (
        dict(tool.output_schema) if tool.output_schema is not None else None
    )
    annotations: dict[str, Any] | None = (
        tool.annotations.model_dump(by_alias=True, exclude_none=True, mode="json")
        if tool.annotations is not None
        else None
    )
    compensation = _declared_compensation(tool.meta)
    try:
        size = len(
            canonical_json([input_schema, output_schema, annotations, tool.title, description, compensation])
        )
    except (TypeError, ValueError) as exc:
        return ExcludedTool(server=server, name=name, reason=f"definition is not canonical JSON: {exc}")
    if size > MAX_DEFINITION_BYTES:
        return ExcludedTool(
            server=server, name=name, reason=f"definition is {size:,} bytes (limit {MAX_DEFINITION_BYTES:,})"
        )
    return ToolSpec(
        server=server,
        name=name,
        title=tool.title,
        description=description,
        input_schema=input_schema,
        output_schema=output_schema,
        annotations=annotations,
        compensation=compensation,
        schema_hash=tool_hash(
            name=name,
            title=tool.title,
            description=description,
            input_schema=input_schema,
            output_schema=output_schema,
            annotations=annotations,
            compensation=compensation,
        ),
    )


def resource_from_mcp(server: str, resource: mcp_types.Resource) -> ResourceSpec:
    return ResourceSpec(
        server=server,
        uri=str(resource.uri),
        name=resource.name,
        title=resource.title,
        description=resource.description,
        mime_type=resource.mime_type,
    )


def resource_template_from_mcp(server: str, template: mcp_types.ResourceTemplate) -> ResourceTemplateSpec:
    return ResourceTemplateSpec(
        server=server,
        uri_template=template.uri_template,
        name=template.name,
        title=template.title,
        description=template.description,
        mime_type=template.mime_type,
    )


def prompt_from_mcp(server: str, prompt: mcp_types.Prompt) -> PromptSpec:
    return PromptSpec(
        server=server,
        name=prompt.name,
        title=prompt.title,
        description=prompt.description,
        arguments=tuple(
            PromptArgumentSpec(name=a.name, description=a.description, required=bool(a.required))
            for a in (prompt.arguments or [])
        ),
    )
