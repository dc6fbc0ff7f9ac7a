"""The virtual file tree: rendered stub modules, browsable, searchable, exportable.

A :class:`VirtualTree` is an immutable view. :func:`render_tree` renders every module once;
:meth:`VirtualTree.restrict` makes a per-principal view that shares those modules and only
re-renders the small index modules (``servers/__init__.py`` and each server's
``__init__.py``), so hidden tools vanish from listings, search, imports and docstrings alike.
"""

from __future__ import annotations

import ast
import functools
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, get_args

from codemode._resources import resource_dir
from codemode.calls import ModuleSource
from codemode.catalog import ServerCatalog, ToolSpec
from codemode.errors import CodemodeError, StubRenderError
from codemode.search import SearchDocument, ToolIndex
from codemode.stubs._names import NameKind, assign_identifiers
from codemode.stubs._render_packages import ServerInitTool, render_root, render_server_init
from codemode.stubs._render_server import File, Lazy, Server, Tool, TreeEntry, render_server, same_catalog
from codemode.stubs._skill_files import (
    SkillFunctionDoc,
    SkillModule,
    render_skill,
    render_skills_index,
    skill_functions,
)
from codemode.stubs._tree_search import SemanticChoice, ViewIndexes

log = logging.getLogger("codemode.stubs")

__all__ = ["DetailLevel", "SearchResult", "TreeEntry", "TreePathError", "VirtualTree", "render_tree"]

DetailLevel = Literal["name", "summary", "full"]
ReadFilter = Callable[[str, Literal["resource", "prompt"]], bool]
"""Whether a view shows a server's ``_resources.py`` (``"resource"``) or ``_prompts.py``."""
_DETAIL_LEVELS: Final = frozenset(get_args(DetailLevel))

RUNTIME_STUB: Final = "codemode_runtime.pyi"
_EXPORT_MARKER: Final = ".codemode-tree"
_MAX_PACKAGES: Final = 4096
"""Package indexes a rendering keeps for reuse (later ones are rendered per view, as before)."""


class TreePathError(CodemodeError, KeyError):
    """A path that is not in the tree (or not allowed: absolute, ``..``, not a file)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path!r}: {reason}")
        self.path = path
        self.reason = reason

    def __str__(self) -> str:  # KeyError would repr() the message
        return f"{self.path!r}: {self.reason}"


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One tool (or a saved skill's function) found by :meth:`VirtualTree.search`."""

    server: str
    """The configured server name (``""`` for a skill)."""
    tool: str
    """The MCP tool name (a skill's function)."""
    module: str
    """``servers.crm.get_customer`` (``skills.renewals`` for a skill)."""
    path: str
    """``servers/crm/get_customer.py``."""
    import_line: str
    """``from servers.crm import get_customer`` (``from skills.renewals import at_risk``)."""
    score: float
    detail: DetailLevel
    text: str
    """``name``: the module; ``summary``: module + one line; ``full``: types + signature + docstring."""
    kind: Literal["tool", "skill"] = "tool"


class _Shared:
    """What all views of one rendering share: the rendered modules and the search indexes."""

    def __init__(
        self,
        servers: tuple[Server, ...],
        lock: threading.Lock,
        semantic: SemanticChoice | None = None,
        previous: _Shared | None = None,
    ) -> None:
        self.servers = servers
        self.tool_count = sum(len(s.tools) for s in servers)
        self.lock = lock
        self._indexes = ViewIndexes(semantic, previous._indexes if previous is not None else None)
        # Package indexes already rendered, by everything their text depends on. Every run gets a
        # view of its own (its principal's tools, its skills), and rendering and AST-checking the
        # same ``__init__.py`` files again for each was ~5 ms of serve's CPU per run.
        self._packages: dict[tuple[object, ...], str] = {}

    def package(self, key: tuple[object, ...], render: Callable[[], str]) -> str:
        """What ``render()`` gives (and gave for an equal ``key``); called under ``lock``."""
        source = self._packages.get(key)
        if source is None:
            source = render()  # raises before anything is kept if the module cannot be rendered
            if len(self._packages) < _MAX_PACKAGES:  # as many as views with distinct tool sets
                self._packages[key] = source
        return source

    def index(
        self, visible: frozenset[str] | None = None, extra: tuple[SearchDocument, ...] = ()
    ) -> ToolIndex:
        """The index of the tools whose modules are in ``visible`` (None: every tool), and ``extra``."""

        def documents() -> list[SearchDocument]:
            tools = (t for s in self.servers for t in s.tools)
            return [t.document.get() for t in tools if visible is None or t.module in visible]

        return self._indexes.get(visible, documents, extra)


@functools.cache
def _runtime_stub() -> str:
    # The runtime package's own stub, exported as ``codemode_runtime.pyi``.
    stub = resource_dir("sandbox") / "runtime" / "codemode_runtime" / "__init__.pyi"
    return stub.read_text(encoding="utf-8")


def render_tree(
    catalogs: Sequence[ServerCatalog],
    *,
    previous: VirtualTree | None = None,
    semantic: SemanticChoice | None = None,
) -> VirtualTree:
    """Render the stub tree for ``catalogs`` (deterministic: same catalogs, same bytes).

    Server and tool identifiers, summaries and the index modules are computed here; each
    tool, resource and prompt module is rendered (and checked) the first time it is read,
    imported, searched at ``full`` detail or exported, then cached. :meth:`VirtualTree.render_all`
    renders everything up front.

    ``previous``: the tree these catalogs replace (after ``list_changed`` or new approvals). A
    server whose catalog and identifier are unchanged keeps the previous tree's modules, rendered
    ones included; the search indexes are the previous ones updated for the tools that changed
    (on first search, as usual), not rebuilt. The result is the same as without ``previous``.

    ``semantic``: the ``[search] semantic`` setting (``auto``, ``on``, ``off``); the environment
    variable ``CODEMODE_SEARCH_SEMANTIC`` overrides it. None: on only when that variable says so.

    Raises :class:`~codemode.errors.NameCollisionError` when two server or tool names cannot
    be told apart as identifiers, and :class:`~codemode.errors.StubRenderError` for a
    catalog that is inconsistent. A module that cannot be rendered safely raises
    ``StubRenderError`` (or ``NameCollisionError`` for its parameters) when it is first used.
    """
    lock = threading.Lock()
    server_idents = assign_identifiers((c.server for c in catalogs), NameKind.SERVER, where="servers")
    # This module's own class: its shared state is what a successor reuses.
    prior = previous._shared if previous is not None else None  # pyright: ignore[reportPrivateUsage]
    before = {s.catalog.server: s for s in prior.servers} if prior is not None else {}
    servers: list[Server] = []
    for catalog in catalogs:
        ident = server_idents[catalog.server]
        old = before.get(catalog.server)
        if old is not None and old.ident == ident and same_catalog(old.catalog, catalog):
            servers.append(old)  # its modules, rendered or not, are exactly what rendering would give
        else:
            servers.append(render_server(catalog, ident, lock))
    servers.sort(key=lambda s: (s.ident.lower(), s.ident))
    return VirtualTree(_Shared(tuple(servers), lock, semantic, prior), None)


class VirtualTree:
    """A rendered stub tree (or a restricted view of one). Implements ``ModuleProvider``.

    Paths are ``/``-separated and relative: ``""`` (the root), ``servers``,
    ``servers/crm``, ``servers/crm/get_customer.py``, ``codemode_runtime.pyi``.
    """

    def __init__(
        self,
        shared: _Shared,
        predicate: Callable[[ToolSpec], bool] | None,
        reads: ReadFilter | None = None,
        skills: tuple[SkillModule, ...] = (),
    ) -> None:
        self._shared = shared
        self._predicate = predicate
        self._reads = reads
        self._skills = skills
        self._files: dict[str, File] = {}
        self._modules: dict[str, File] = {}
        self._children: dict[str, list[TreeEntry]] = {}
        self._tools: dict[str, Tool] = {}
        self._tools_by_name: dict[tuple[str, str], Tool] = {}
        self._build()
        if skills:
            self._build_skills()

    # -- construction ---------------------------------------------------------------------------

    def _visible(self, server: Server) -> list[Tool]:
        if self._predicate is None:
            return list(server.tools)
        predicate = self._predicate
        return [t for t in server.tools if predicate(t.spec)]

    def _build(self) -> None:
        lock = self._shared.lock
        root_dirs: list[TreeEntry] = []
        index_lines: list[tuple[str, str]] = []
        for server in self._shared.servers:
            tools = self._visible(server)
            catalog = server.catalog
            reads = self._reads
            resources = server.resources if reads is None or reads(catalog.server, "resource") else None
            prompts = server.prompts if reads is None or reads(catalog.server, "prompt") else None
            if not tools and resources is None and prompts is None:
                continue
            shown = (
                _resource_count(catalog) if resources is not None else 0,
                len(catalog.prompts) if prompts is not None else 0,
            )
            summary = _server_summary(len(tools), *shown)
            index_lines.append((server.ident, summary))
            base = f"servers/{server.ident}"
            # The tool list of the index module is built when it is first rendered, not per view.
            init = Lazy(functools.partial(_render_server_init, self._shared, server, tools, *shown), lock)
            entries = [
                self._add_file(
                    f"{base}/__init__.py", init, f"servers.{server.ident}", f"index: {summary}", True
                )
            ]
            for tool in tools:
                self._tools[tool.module] = tool
                self._tools_by_name[(tool.spec.server, tool.spec.name)] = tool
                self._put(tool.path, tool.file)
                entries.append(tool.entry)
            if prompts is not None:
                entries.append(
                    self._add_file(
                        f"{base}/_prompts.py",
                        prompts,
                        f"servers.{server.ident}._prompts",
                        _plural(len(catalog.prompts), "prompt"),
                        False,
                    )
                )
            if resources is not None:
                entries.append(
                    self._add_file(
                        f"{base}/_resources.py",
                        resources,
                        f"servers.{server.ident}._resources",
                        _plural(_resource_count(catalog), "resource") + " (read functions)",
                        False,
                    )
                )
            self._children[base] = entries
            root_dirs.append(TreeEntry(base, server.ident, "directory", f"servers.{server.ident}", summary))
        root_key = ("servers", *index_lines)
        root = Lazy(functools.partial(self._shared.package, root_key, lambda: render_root(index_lines)), lock)
        init_entry = self._add_file("servers/__init__.py", root, "servers", "index of all servers", True)
        self._children["servers"] = [init_entry, *root_dirs]
        runtime = TreeEntry(
            RUNTIME_STUB, RUNTIME_STUB, "file", None, "the runtime API the stubs call (types only)"
        )
        self._children[""] = [
            TreeEntry("servers", "servers", "directory", "servers", _plural(len(root_dirs), "server")),
            runtime,
        ]

    def _build_skills(self) -> None:
        lock = self._shared.lock
        skills = self._skills
        index = Lazy(functools.partial(render_skills_index, skills), lock)
        entries = [self._add_file("skills/__init__.py", index, "skills", "index of saved skills", True)]
        for skill in skills:
            source = Lazy(functools.partial(render_skill, skill), lock)
            entries.append(
                self._add_file(f"skills/{skill.name}.py", source, f"skills.{skill.name}", skill.line, False)
            )
        self._children["skills"] = entries
        summary = _plural(len(skills), "saved skill")
        self._children[""].insert(1, TreeEntry("skills", "skills", "directory", "skills", summary))

    def with_skills(self, skills: Sequence[SkillModule]) -> VirtualTree:
        """This view with ``skills/`` holding exactly ``skills`` (none: without ``skills/``)."""
        return VirtualTree(self._shared, self._predicate, self._reads, tuple(skills))

    def _add_file(self, path: str, lazy: Lazy[str], module: str, summary: str, package: bool) -> TreeEntry:
        self._put(path, File(module, package, lazy))
        return TreeEntry(path, path.rsplit("/", 1)[-1], "file", module, summary)

    def _put(self, path: str, file: File) -> None:
        self._files[path] = file
        self._modules[file.module] = file

    def render_all(self) -> None:
        """Render (and check) every module of this view now; raises what rendering raises."""
        for file in self._files.values():
            file.lazy.get()

    # -- browsing -------------------------------------------------------------------------------

    def list(self, path: str = "") -> list[TreeEntry]:
        """The entries of a directory (or the one entry of a file)."""
        normalized = _normalize(path)
        children = self._children.get(normalized)
        if children is not None:
            return list(children)
        parent = normalized.rpartition("/")[0]
        for entry in self._children.get(parent, []):
            if entry.path == normalized:
                return [entry]
        raise TreePathError(path, "no such file or directory in the tree")

    def read(self, path: str) -> str:
        """The source of one file."""
        normalized = _normalize(path)
        if normalized == RUNTIME_STUB:
            return _runtime_stub()
        file = self._files.get(normalized)
        if file is not None:
            return file.lazy.get()
        if normalized in self._children:
            raise TreePathError(path, "is a directory; use list()")
        raise TreePathError(path, "no such file in the tree")

    def files(self) -> Iterator[str]:
        """Every file path of this view, in a stable order (the runtime stub last)."""
        yield from sorted(self._files)
        yield RUNTIME_STUB

    def module_source(self, module: str) -> ModuleSource | None:
        """``ModuleProvider``: the source of a dotted ``servers...`` module, or None.

        Renders the module on first use; raises ``StubRenderError`` if it cannot be rendered safely.
        """
        file = self._modules.get(module)
        if file is None:
            return None
        return ModuleSource(source=file.lazy.get(), is_package=file.package)

    # -- tools ----------------------------------------------------------------------------------

    def tool_for_module(self, module: str) -> ToolSpec | None:
        """The tool behind ``servers.<server>.<tool>`` (None if unknown or hidden in this view)."""
        tool = self._tools.get(module)
        return tool.spec if tool is not None else None

    def tool(self, server: str, tool_name: str) -> ToolSpec | None:
        """The tool with this configured server name and MCP tool name, if visible."""
        tool = self._tools_by_name.get((server, tool_name))
        return tool.spec if tool is not None else None

    def module_for_tool(self, server: str, tool_name: str) -> str | None:
        """The dotted module of a tool (``servers.crm.get_customer``), if visible."""
        tool = self._tools_by_name.get((server, tool_name))
        return tool.module if tool is not None else None

    def tools(self) -> list[ToolSpec]:
        """Every visible tool, in tree order."""
        return [tool.spec for tool in self._tools.values()]

    def restrict(self, predicate: Callable[[ToolSpec], bool], reads: ReadFilter | None = None) -> VirtualTree:
        """A view without the tools ``predicate`` rejects, nor the resource and prompt modules
        ``reads`` rejects (each applied on top of this view's filters)."""
        outer, outer_reads = self._predicate, self._reads

        def combined(spec: ToolSpec) -> bool:
            return (outer is None or outer(spec)) and predicate(spec)

        def combined_reads(server: str, kind: Literal["resource", "prompt"]) -> bool:
            return all(check is None or check(server, kind) for check in (outer_reads, reads))

        both = None if reads is None and outer_reads is None else combined_reads
        return VirtualTree(self._shared, predicate if outer is None else combined, both, self._skills)

    # -- search ---------------------------------------------------------------------------------

    def search(self, query: str, k: int = 5, detail: DetailLevel = "summary") -> list[SearchResult]:
        """The ``k`` visible tools that best match ``query``, with text at the requested detail."""
        if detail not in _DETAIL_LEVELS:
            raise ValueError(f"detail must be one of {sorted(_DETAIL_LEVELS)}, not {detail!r}")
        if k <= 0:
            return []
        skills = self._skill_functions()
        results: list[SearchResult] = []
        for hit in self._index(skills).search(query, k):
            tool, skill = self._tools.get(hit.key), skills.get(hit.key)
            if tool is not None:
                results.append(_result(tool, hit.score, detail))
            elif skill is not None:
                results.append(_skill_result(skill, hit.score, detail))
            if len(results) == k:
                break
        return results

    def search_snapshot(self) -> tuple[ToolIndex, dict[str, SearchResult]]:
        """This view's index and, per index key, the tool's result at ``summary`` detail (score 0).

        What a search cache needs to answer ``name`` and ``summary`` searches without this tree.
        """
        skills = self._skill_functions()
        rows = {tool.module: _result(tool, 0.0, "summary") for tool in self._tools.values()}
        rows |= {key: _skill_result(skill, 0.0, "summary") for key, skill in skills.items()}
        return self._index(skills), rows

    def build_index(self) -> None:
        """Build this view's search index now instead of on the first search."""
        self._index(self._skill_functions())

    def _skill_functions(self) -> dict[str, SkillFunctionDoc]:
        """The public functions of this view's skills, by search key: searched with its tools."""
        return {f.key: f for skill in self._skills for f in skill_functions(skill)}

    def _index(self, skills: dict[str, SkillFunctionDoc]) -> ToolIndex:
        return self._shared.index(self._visible_modules(), tuple(f.document for f in skills.values()))

    def _visible_modules(self) -> frozenset[str] | None:
        """The key of this view's index: None when nothing is hidden (the unrestricted index)."""
        if len(self._tools) == self._shared.tool_count:
            return None
        return frozenset(self._tools)

    # -- export ---------------------------------------------------------------------------------

    def export(self, directory: Path) -> Path:
        """Write the tree under ``directory`` (``servers/`` plus ``codemode_runtime.pyi``).

        A previous export in the same place is replaced as a whole (stale tool modules
        disappear); a ``servers`` directory that codemode did not write is never touched.
        Returns ``directory``.
        """
        directory = Path(directory)
        target = directory / "servers"
        if target.exists() and not (target / _EXPORT_MARKER).is_file():
            raise CodemodeError(
                f"{target} exists and was not written by codemode; refusing to overwrite it"
                " (choose another directory)"
            )
        directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".servers-new-", dir=directory))
        try:
            for path, file in self._files.items():
                if not path.startswith("servers/"):
                    continue  # saved skills belong to a tenant: not part of the exported stubs
                try:
                    source = file.lazy.get()
                except CodemodeError as exc:  # one hostile definition costs its module, not the export
                    log.warning("not exported: %s: %s", path, exc)
                    continue
                out = staging / path.removeprefix("servers/")
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(source, encoding="utf-8", newline="\n")
            (staging / _EXPORT_MARKER).write_text(
                "Written by codemode (codemode sync --export); replaced as a whole on the next export.\n",
                encoding="utf-8",
            )
            if target.exists():
                retired = Path(tempfile.mkdtemp(prefix=".servers-old-", dir=directory))
                os.replace(target, retired / "servers")
                os.replace(staging, target)
                shutil.rmtree(retired, ignore_errors=True)
            else:
                os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        stub = directory / RUNTIME_STUB
        tmp = directory / (RUNTIME_STUB + ".tmp")
        tmp.write_text(_runtime_stub(), encoding="utf-8", newline="\n")
        os.replace(tmp, stub)
        return directory


def _render_server_init(
    shared: _Shared, server: Server, tools: Sequence[Tool], resources: int, prompts: int
) -> str:
    catalog = server.catalog
    listed = [ServerInitTool(t.ident, t.summary) for t in tools]
    # Hidden in this view, left out for a name clash, or excluded by the catalog.
    excluded = len(catalog.excluded) + len(catalog.tools) - len(tools)
    key = ("server", catalog.server, server.ident, *listed, resources, prompts, excluded)
    return shared.package(
        key,
        lambda: render_server_init(
            catalog.server, server.ident, listed, resources=resources, prompts=prompts, excluded=excluded
        ),
    )


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _resource_count(catalog: ServerCatalog) -> int:
    return len(catalog.resources) + len(catalog.resource_templates)


def _server_summary(tools: int, resources: int, prompts: int) -> str:
    parts = [_plural(tools, "tool")]
    if resources:
        parts.append(_plural(resources, "resource"))
    if prompts:
        parts.append(_plural(prompts, "prompt"))
    return ", ".join(parts)


_BAD_PATH: Final = re.compile(r"[\\\x00]|^[A-Za-z]:")


def _normalize(path: str) -> str:
    if not isinstance(path, str):  # pyright: ignore[reportUnnecessaryIsInstance] - callers may be untyped
        raise TreePathError(repr(path), "a path must be a string")
    if path.startswith("/") or _BAD_PATH.search(path):
        raise TreePathError(path, "paths are relative to the tree root and use '/'")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise TreePathError(path, "'..' is not allowed in tree paths")
    return "/".join(parts)


def _result(tool: Tool, score: float, detail: DetailLevel) -> SearchResult:
    return SearchResult(
        server=tool.spec.server,
        tool=tool.spec.name,
        module=tool.module,
        path=tool.path,
        import_line=f"from servers.{tool.server_ident} import {tool.ident}",
        score=score,
        detail=detail,
        text=_detail_text(tool, detail),
    )


def _skill_result(skill: SkillFunctionDoc, score: float, detail: DetailLevel) -> SearchResult:
    module = f"skills.{skill.skill}"
    text = skill.text(detail)
    return SearchResult(
        "",
        skill.function,
        module,
        f"skills/{skill.skill}.py",
        skill.import_line,
        score,
        detail,
        text,
        "skill",
    )


def _detail_text(tool: Tool, detail: DetailLevel) -> str:
    if detail == "name":
        return tool.module
    summary = f"{tool.module}: {tool.summary}"  # already one cleaned sentence (tool_summary)
    if detail == "summary":
        return summary
    try:
        return _signature_block(tool.source, tool.ident)
    except CodemodeError:  # one tool that cannot be rendered must not fail the search
        return f"{summary}\n(no signature: its definition cannot be rendered safely)"


def _signature_block(source: str, ident: str) -> str:
    """The type definitions, signature and docstring of a tool module (no imports, no body)."""
    module = ast.parse(source)
    lines = source.split("\n")
    start: int | None = None
    for node in module.body[2:]:
        if isinstance(node, ast.FunctionDef) and node.name == ident:
            first = start if start is not None else node.lineno
            body_start = node.body[0]
            end = body_start.end_lineno if isinstance(body_start, ast.Expr) else node.lineno
            assert end is not None
            return "\n".join(lines[first - 1 : end]).strip("\n")
        if isinstance(node, ast.ClassDef | ast.AnnAssign) or (
            isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        ):
            start = node.lineno if start is None else start
    raise StubRenderError(f"tool module {ident!r} has no function {ident!r}")  # pragma: no cover
