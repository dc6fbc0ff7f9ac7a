"""Matching ``server/tool`` selectors (``crm/*``, ``*/get_*``, ``*``) against tools."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import TypeVar

_V = TypeVar("_V")


def matches(selector: str, server: str, tool: str) -> bool:
    if selector == "*":
        return True
    want_server, _, want_tool = selector.partition("/")
    # fnmatchcase: selectors are exact about case; a policy for "crm/Get*" must not match "get_x".
    return fnmatch.fnmatchcase(server, want_server) and fnmatch.fnmatchcase(tool, want_tool)


def any_match(selectors: Iterable[str], server: str, tool: str) -> bool:
    return any(matches(s, server, tool) for s in selectors)


def lookup(table: Mapping[str, _V], server: str, tool: str) -> _V | None:
    """The value of the most specific matching selector (exact beats glob beats ``*``)."""
    exact = f"{server}/{tool}"
    if exact in table:
        return table[exact]
    best: tuple[int, _V] | None = None
    for selector, value in table.items():
        if matches(selector, server, tool):
            specificity = len(selector.replace("*", ""))
            if best is None or specificity > best[0]:
                best = (specificity, value)
    return best[1] if best else None


def names_server(selector: str, server: str) -> bool:
    """Whether ``selector`` reaches some tool of ``server``."""
    return selector == "*" or fnmatch.fnmatchcase(server, selector.partition("/")[0])


def server_granted(selectors: Iterable[str], server: str) -> bool:
    """Whether any selector grants some tool of ``server`` (resources and prompts follow tools)."""
    return any(names_server(s, server) for s in selectors)


def server_denied(selectors: Iterable[str], server: str) -> bool:
    """Whether a selector denies every tool of ``server`` (``server/*``, ``*``): its resources
    and prompts go with them."""
    return any(s == "*" or (s.endswith("/*") and names_server(s, server)) for s in selectors)
