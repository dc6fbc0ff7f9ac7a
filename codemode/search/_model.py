"""Public value types of tool search."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SearchDocument", "SearchHit"]


@dataclass(frozen=True, slots=True)
class SearchDocument:
    """One tool as the search index sees it.

    Every text field is untrusted (it comes from an MCP server); the index caps how much of it is read.
    """

    key: str
    """Opaque id chosen by the caller, e.g. ``"crm/get_customer"``; returned in :class:`SearchHit`."""
    server: str
    name: str
    """The MCP tool name, e.g. ``"get_customer"`` or ``"repos.list-commits"``."""
    title: str | None
    description: str
    parameters: tuple[tuple[str, str], ...] = ()
    """``(parameter name, parameter description)`` pairs."""
    outputs: tuple[tuple[str, str], ...] = ()
    """``(field name, field description)`` pairs of the output schema's top-level properties."""


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked result: the document's key and its relevance score (higher is better)."""

    key: str
    score: float
