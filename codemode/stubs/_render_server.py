"""One server's part of the stub tree: its tool modules, resources and prompts, rendered lazily.

These pieces are immutable once made, so a tree rendered after a catalog change reuses a whole
:class:`Server` for every server whose catalog did not change (:func:`same_catalog`), modules
already rendered included; only changed servers go through :func:`render_server` again.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from codemode.catalog import ServerCatalog, ToolSpec
from codemode.errors import CodemodeError, StubRenderError
from codemode.search import SearchDocument
from codemode.stubs._names import NameKind, identifiers_apart
from codemode.stubs._render_prompts import render_prompts
from codemode.stubs._render_resources import render_resources
from codemode.stubs._render_tool import render_tool, tool_summary
from codemode.stubs._schema_document import as_map, description_of

__all__ = ["File", "Lazy", "Server", "Tool", "TreeEntry", "render_server", "same_catalog", "search_document"]

T = TypeVar("T")
log = logging.getLogger("codemode.stubs")


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One item of :meth:`VirtualTree.list`."""

    path: str
    """Path in the tree, e.g. ``servers/crm/get_customer.py`` (directories without a slash)."""
    name: str
    """Last path component."""
    kind: Literal["directory", "file"]
    module: str | None
    """Dotted module name (``servers.crm``, ``servers.crm.get_customer``); None for the runtime stub."""
    summary: str
    """One line about the entry (cleaned server text)."""


class Lazy(Generic[T]):
    """A module source (or a tool's search document) made on first use, then cached; made under ``lock``."""

    __slots__ = ("_lock", "_render", "_value")

    def __init__(self, render: Callable[[], T], lock: threading.Lock) -> None:
        self._render = render
        self._lock = lock
        self._value: T | None = None

    def get(self) -> T:
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._render()
                value = self._value
        return value


@dataclass(frozen=True, slots=True)
class File:
    module: str
    package: bool
    lazy: Lazy[str]


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool module; its file and listing entry are built once and shared by every view."""

    spec: ToolSpec
    server_ident: str
    ident: str
    file: File
    entry: TreeEntry
    document: Lazy[SearchDocument]
    """What the search index reads; shared by the trees that reuse this tool, so an index update
    recognises it as unchanged by identity."""

    @property
    def source(self) -> str:
        return self.file.lazy.get()

    @property
    def module(self) -> str:
        return self.file.module

    @property
    def path(self) -> str:
        return self.entry.path

    @property
    def summary(self) -> str:
        return self.entry.summary


@dataclass(frozen=True, slots=True)
class Server:
    catalog: ServerCatalog
    ident: str
    tools: tuple[Tool, ...]
    resources: Lazy[str] | None
    prompts: Lazy[str] | None


def same_catalog(old: ServerCatalog, new: ServerCatalog) -> bool:
    """Whether ``new`` renders as ``old`` did: equal tools (usually the same objects) and the rest."""
    if old is new:
        return True
    return (
        len(old.tools) == len(new.tools)
        and all(a is b or a == b for a, b in zip(old.tools, new.tools, strict=True))
        and old.resources == new.resources
        and old.resource_templates == new.resource_templates
        and old.prompts == new.prompts
        and old.excluded == new.excluded
    )


def render_server(catalog: ServerCatalog, ident: str, lock: threading.Lock) -> Server:
    tool_idents, left_out = identifiers_apart(
        (t.name for t in catalog.tools), NameKind.TOOL, where=f"tools of server {catalog.server!r}"
    )
    for reason in sorted(set(left_out.values())):
        log.warning("%s: left out of the stubs; rename one of them on the server", reason)
    tools: list[Tool] = []
    for spec in catalog.tools:
        if spec.name in left_out:
            continue
        if spec.server != catalog.server:
            raise StubRenderError(
                f"tool {spec.name!r} says it belongs to server {spec.server!r}"
                f" but is listed by {catalog.server!r}"
            )
        tool_ident = tool_idents[spec.name]
        module = f"servers.{ident}.{tool_ident}"
        lazy = _module(lock, f"tool {spec.name!r}", render_tool, spec, tool_ident)
        entry = TreeEntry(
            f"servers/{ident}/{tool_ident}.py", f"{tool_ident}.py", "file", module, tool_summary(spec)
        )
        document = Lazy(functools.partial(search_document, spec, module), lock)
        tools.append(Tool(spec, ident, tool_ident, File(module, False, lazy), entry, document))
    tools.sort(key=lambda t: (t.ident.lower(), t.ident))
    resources = (
        _module(
            lock,
            f"the resources of server {catalog.server!r}",
            render_resources,
            catalog.server,
            catalog.resources,
            catalog.resource_templates,
        )
        if catalog.resources or catalog.resource_templates
        else None
    )
    prompts = (
        _module(
            lock, f"the prompts of server {catalog.server!r}", render_prompts, catalog.server, catalog.prompts
        )
        if catalog.prompts
        else None
    )
    return Server(catalog, ident, tuple(tools), resources, prompts)


def _module(lock: threading.Lock, what: str, render: Callable[..., str], *args: object) -> Lazy[str]:
    """A module made by ``render(*args)`` on first use, whose every failure is a
    :class:`StubRenderError` (a :class:`CodemodeError`): the one failure that callers (an import
    in the sandbox, a search, an export) refuse for this module alone. Rendering reads hostile
    definitions; a bug it meets must not pass for another kind of error and take more down with it."""

    def guarded() -> str:
        try:
            return render(*args)
        except CodemodeError:
            raise
        except (RecursionError, MemoryError, ValueError, TypeError, KeyError, IndexError) as exc:
            raise StubRenderError(f"{what} cannot be rendered safely ({type(exc).__name__})") from exc

    return Lazy(guarded, lock)


def search_document(spec: ToolSpec, module: str) -> SearchDocument:
    """The tool as the search index sees it, keyed by its module."""
    props = as_map(spec.input_schema.get("properties")) or {}
    # The index caps every text it reads (parameter descriptions included).
    parameters = tuple((str(key), description_of(sub)) for key, sub in props.items())
    outputs = as_map((spec.output_schema or {}).get("properties")) or {}
    return SearchDocument(
        key=module,
        server=spec.server,
        name=spec.name,
        title=spec.title,
        description=spec.description or "",
        parameters=parameters,
        outputs=tuple((str(key), description_of(sub)) for key, sub in outputs.items()),
    )
