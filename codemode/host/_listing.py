"""A server's catalog, listed in full: tools, resources, resource templates and prompts.

Every listing follows its cursors to the end, within bounds a hostile server cannot stretch: a page
cap, a repeated-cursor guard, and a cap on tools per server. Tools that cannot be offered (a bad
name, listed twice, over the cap) are kept as ``ExcludedTool`` with the reason, so a user sees why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import mcp_types
from mcp import Client

from codemode.catalog import (
    ExcludedTool,
    PromptSpec,
    ResourceSpec,
    ResourceTemplateSpec,
    ServerCatalog,
    ToolSpec,
    prompt_from_mcp,
    resource_from_mcp,
    resource_template_from_mcp,
    tool_from_mcp,
)

MAX_LIST_PAGES = 100
"""A paginator that never ends must not hang the host: stop after this many pages."""

MAX_TOOLS_PER_SERVER = 10_000

_PageT = TypeVar("_PageT")
_ItemT = TypeVar("_ItemT")


async def list_catalog(
    server: str,
    client: Client,
    *,
    learn: Callable[[Sequence[mcp_types.Tool]], None],
    ttls: list[int] | None = None,
) -> ServerCatalog:
    """List what ``client``'s server offers; ``learn`` sees the raw tools (their task support), and
    ``ttls`` collects each page's ``ttlMs`` (2026-07-28 caching hints; see :func:`fresh_for_s`)."""
    caps = client.server_capabilities
    paginate = _Pages(ttls)
    tools: list[ToolSpec] = []
    excluded: list[ExcludedTool] = []
    if caps.tools is not None:
        listed = await paginate(lambda c: client.list_tools(cursor=c), lambda p: p.tools)
        learn(listed)
        tools, excluded = _offered(server, listed)
    resources: list[ResourceSpec] = []
    templates: list[ResourceTemplateSpec] = []
    if caps.resources is not None:
        listed_resources = await paginate(lambda c: client.list_resources(cursor=c), lambda p: p.resources)
        resources = [resource_from_mcp(server, r) for r in listed_resources]
        listed_templates = await paginate(
            lambda c: client.list_resource_templates(cursor=c), lambda p: p.resource_templates
        )
        templates = [resource_template_from_mcp(server, t) for t in listed_templates]
    prompts: list[PromptSpec] = []
    if caps.prompts is not None:
        listed_prompts = await paginate(lambda c: client.list_prompts(cursor=c), lambda p: p.prompts)
        prompts = [prompt_from_mcp(server, p) for p in listed_prompts]
    return ServerCatalog(
        server=server,
        tools=tuple(tools),
        resources=tuple(resources),
        resource_templates=tuple(templates),
        prompts=tuple(prompts),
        excluded=tuple(excluded),
    )


def _offered(server: str, listed: Sequence[mcp_types.Tool]) -> tuple[list[ToolSpec], list[ExcludedTool]]:
    """The tools to offer, in the server's order, and the ones left out with why."""
    tools: list[ToolSpec] = []
    excluded: list[ExcludedTool] = []
    seen: set[str] = set()
    for tool in listed:
        converted = tool_from_mcp(server, tool)
        if isinstance(converted, ExcludedTool):
            excluded.append(converted)
        elif converted.name in seen:
            excluded.append(
                ExcludedTool(server=server, name=converted.name, reason="listed twice by the server")
            )
        elif len(tools) >= MAX_TOOLS_PER_SERVER:
            excluded.append(
                ExcludedTool(server=server, name=converted.name, reason=f"over {MAX_TOOLS_PER_SERVER} tools")
            )
        else:
            seen.add(converted.name)
            tools.append(converted)
    return tools, excluded


def fresh_for_s(ttls: Sequence[int]) -> float | None:
    """How long a listing stays fresh: the shortest positive ``ttlMs`` of its pages, in seconds.

    None when no page promised anything: a ``ttlMs`` of 0 (the default, and what an older
    protocol's pages read as) says the result is stale at once, and the client MAY re-list each
    time; codemode re-lists on the server's change announcements instead, and every call checks
    the pins, so such a server costs no extra round trip per call."""
    promised = [ttl for ttl in ttls if ttl > 0]
    return min(promised) / 1000 if promised else None


class _Pages:
    """Follows ``nextCursor`` to the end, with a page cap and a repeated-cursor guard, and keeps
    each page's ``ttlMs`` in ``ttls`` when given."""

    def __init__(self, ttls: list[int] | None) -> None:
        self._ttls = ttls

    async def __call__(
        self,
        fetch: Callable[[str | None], Awaitable[_PageT]],
        items: Callable[[_PageT], Sequence[_ItemT]],
    ) -> list[_ItemT]:
        collected: list[_ItemT] = []
        cursor: str | None = None
        seen_cursors: set[str] = set()
        for _ in range(MAX_LIST_PAGES):
            page = await fetch(cursor)
            collected.extend(items(page))
            ttl = getattr(page, "ttl_ms", None)
            if self._ttls is not None and isinstance(ttl, int):
                self._ttls.append(ttl)
            cursor = getattr(page, "next_cursor", None)
            if cursor is None or cursor in seen_cursors:
                break
            seen_cursors.add(cursor)
        return collected
