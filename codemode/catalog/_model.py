"""What a server offers, as plain immutable values.

These are codemode's own types, not the SDK's: the catalog is pinned in ``codemode.lock``,
rendered into stubs and searched, and none of that should move when the SDK's models do.
Field names follow Python style; :func:`codemode.catalog.tool_from_mcp` converts from the
wire shape.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

JsonObject = dict[str, Any]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolSpec(_Frozen):
    """One tool of one server, as listed by ``tools/list``.

    ``server`` is the configured server name (identity comes from the config, never from
    ``serverInfo``). ``schema_hash`` is the canonical hash of the definition (see
    :func:`codemode.catalog.tool_hash`).
    """

    server: str
    name: str
    title: str | None = None
    description: str | None = None
    input_schema: JsonObject = Field(default_factory=lambda: {"type": "object"})
    output_schema: JsonObject | None = None
    annotations: JsonObject | None = None
    compensation: JsonObject | None = None
    """How the server says a call of this tool is undone (its ``_meta``
    ``dev.codemode/compensation``), as it declared it: unchecked and untrusted. Hashed, so an
    approved pin binds it; used only for a trusted server (see ``codemode.engine``)."""
    schema_hash: str
    hints_accepted: bool = False
    """On the copies stubs are rendered from (:meth:`Pins.usable`): a reviewer accepted this
    tool's annotations at ``codemode pin``. Not part of the definition, nor of its hash."""

    @property
    def read_only_hint(self) -> bool:
        """The server's ``readOnlyHint``; untrusted unless the server is configured as trusted."""
        return bool((self.annotations or {}).get("readOnlyHint", False))


class ResourceSpec(_Frozen):
    server: str
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


class ResourceTemplateSpec(_Frozen):
    server: str
    uri_template: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


class PromptArgumentSpec(_Frozen):
    name: str
    description: str | None = None
    required: bool = False


class PromptSpec(_Frozen):
    server: str
    name: str
    title: str | None = None
    description: str | None = None
    arguments: tuple[PromptArgumentSpec, ...] = ()


class ExcludedTool(_Frozen):
    """A tool the server listed but codemode refuses to expose (for example an invalid name)."""

    server: str
    name: str
    reason: str


class ToolStatus(StrEnum):
    """A tool's standing against the pins in ``codemode.lock``."""

    APPROVED = "approved"
    """The live definition hashes to the approved pin: usable."""
    NEW = "new"
    """Listed by the server but never approved: not usable until ``codemode pin --approve``."""
    CHANGED = "changed"
    """The live definition differs from the approved pin (drift): not usable until re-approved."""
    REMOVED = "removed"
    """Pinned but no longer listed by the server: calls fail closed."""


class ServerCatalog(_Frozen):
    """Everything one server lists, at one moment."""

    server: str
    tools: tuple[ToolSpec, ...] = ()
    resources: tuple[ResourceSpec, ...] = ()
    resource_templates: tuple[ResourceTemplateSpec, ...] = ()
    prompts: tuple[PromptSpec, ...] = ()
    excluded: tuple[ExcludedTool, ...] = ()

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)
