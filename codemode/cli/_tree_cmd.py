"""``codemode tree`` and ``codemode search``: browse the stub tree the model sees."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from codemode.cli._common import (
    config_option,
    fail,
    handle_errors,
    json_option,
    load,
    print_json,
    stderr,
    stdout,
)
from codemode.config import Config, SemanticChoice

if TYPE_CHECKING:
    from codemode.catalog import ServerCatalog
    from codemode.search._catalog_cache import CachedSearch
    from codemode.search._semantic import Embedder
    from codemode.stubs import VirtualTree

# ``codemode search`` from a cached index imports none of the catalog, stub or broker modules: in a
# fresh process those imports alone cost more than the whole cached search.

live_option = click.option(
    "--live",
    is_flag=True,
    help="Connect to the servers instead of reading codemode.lock (adds resources and prompts, and "
    "shows only tools the servers still list unchanged).",
)


def approved_catalogs(config: Config) -> list[ServerCatalog]:
    """The approved tools as codemode.lock holds them: no server is started, nothing is fetched."""
    from codemode.catalog import ServerCatalog, ToolSpec, load_lock

    lock = load_lock(config.lock_path)
    catalogs: list[ServerCatalog] = []
    for server, entries in sorted(lock.servers.items()):
        tools = [
            ToolSpec(
                server=server,
                name=name,
                title=entry.approved.definition.get("title"),
                description=entry.approved.definition.get("description"),
                input_schema=entry.approved.definition.get("inputSchema") or {"type": "object"},
                output_schema=entry.approved.definition.get("outputSchema"),
                annotations=entry.approved.definition.get("annotations"),
                schema_hash=entry.approved.hash,
            )
            for name, entry in sorted(entries.items())
            if entry.approved is not None and not entry.removed and server in config.servers
        ]
        catalogs.append(ServerCatalog(server=server, tools=tuple(tools)))
    return catalogs


def ranking(config: Config) -> tuple[SemanticChoice, Embedder | None]:
    """``[search] semantic`` as the engine reads it (same function, same override) and the model to
    rank with: None for BM25 alone, and then, if the signal was asked for, the engine's warning."""
    from codemode.search._semantic import MISSING_EXTRA, load_embedder, semantic_setting

    setting = semantic_setting(config.search.semantic)
    embedder = load_embedder() if setting != "off" else None
    if embedder is None and setting == "on":
        from rich.markup import escape

        stderr.print(f"[yellow]warning:[/] {escape(MISSING_EXTRA)}", markup=True, highlight=False)
    return setting, embedder


def load_tree(config: Config, live: bool = False, semantic: SemanticChoice | None = None) -> VirtualTree:
    """The stubs of approved tools (what programs may import), from the lock or, live, the servers.

    ``semantic``: how the tree's search ranks (default: ``[search] semantic``, as the engine does).
    """
    from codemode.stubs import render_tree

    choice = config.search.semantic if semantic is None else semantic
    if not live:
        return render_tree(approved_catalogs(config), semantic=choice)
    from codemode.catalog import Pins
    from codemode.cli._signals import run_until_signalled
    from codemode.host import McpHost

    async def listed() -> list[ServerCatalog]:
        async with McpHost(config) as host:
            return host.catalogs()

    return render_tree(Pins(config.lock_path).usable(run_until_signalled(listed)), semantic=choice)


def principal_view(config: Config, tree: VirtualTree, principal: str | None) -> VirtualTree:
    from codemode.broker._visibility import visible_to

    return tree if principal is None else tree.restrict(visible_to(config.policy, principal))


def _cache_parts(
    config: Config, principal: str | None, embedder: Embedder | None
) -> list[bytes | str] | None:
    """What a cached search depends on, or None when it cannot be cached (no lock).

    The ranker is part of it: BM25, or hybrid with the model's id (its files' identity), so turning
    the setting on or off, or another model, names another entry.
    """
    try:
        lock = config.lock_path.read_bytes()
    except OSError:
        return None
    ranker = "bm25" if embedder is None else f"hybrid:{embedder.model_id}"
    parts: list[bytes | str] = [ranker, lock, json.dumps(sorted(config.servers))]
    if principal is not None:
        rules = config.policy.principal(principal)
        parts += [principal, rules.model_dump_json() if rules is not None else "refused"]
    return parts


def cached_search(config: Config, principal: str | None) -> CachedSearch:
    """The index of what ``principal`` may use, from the cache if the lock, policy and ranker are
    unchanged; else built from the lock (a hybrid one embeds only tools its vector cache lacks)."""
    import codemode
    from codemode.search._catalog_cache import CachedRow, CachedSearch, cache_key

    setting, embedder = ranking(config)
    parts = _cache_parts(config, principal, embedder)
    key = cache_key(parts, [Path(codemode.__file__).parent / "stubs"]) if parts is not None else None
    if key is not None:
        found = CachedSearch.load(key, embedder=embedder)
        if found is not None:
            return found
    # "off" when the model is missing: the warning is printed above, once.
    semantic: SemanticChoice = setting if embedder is not None else "off"
    view = principal_view(config, load_tree(config, semantic=semantic), principal)
    index, results = view.search_snapshot()
    rows = {
        module: CachedRow(r.server, r.tool, r.module, r.path, r.import_line, r.text)
        for module, r in results.items()
    }
    built = CachedSearch(index, rows)
    if key is not None and index.hybrid == (embedder is not None):  # never file it under another ranker
        built.save(key)
    return built


@click.command()
@config_option
@json_option
@click.argument("path", default="", metavar="[PATH]")
@click.option("--principal", help="Show the tree as this principal sees it.")
@live_option
@handle_errors
def tree(config_path: Path | None, as_json: bool, path: str, principal: str | None, live: bool) -> None:
    """List a directory of the stub tree, or print a file.

    \b
    codemode tree                          servers/ and the runtime stub
    codemode tree servers/crm              the crm tools, one line each
    codemode tree servers/crm/get_customer.py

    Only approved tools appear (see 'codemode pin'); read from codemode.lock unless --live.
    """
    from codemode.search._semantic import semantic_setting
    from codemode.stubs import TreePathError

    config = load(config_path)
    # The setting only, not the model: listing and reading never search, so nothing is embedded.
    view = principal_view(
        config, load_tree(config, live, semantic_setting(config.search.semantic)), principal
    )
    try:
        if path.endswith((".py", ".pyi")):
            source = view.read(path)
            if as_json:
                print_json({"path": path, "source": source})
            else:
                click.echo(source, nl=False)
            return
        entries = view.list(path)
    except TreePathError as exc:
        fail(str(exc), hint="run 'codemode tree' to see what exists")
    if as_json:
        print_json([{"path": e.path, "kind": e.kind, "name": e.name, "summary": e.summary} for e in entries])
        return
    for entry in entries:
        suffix = "/" if entry.kind == "directory" else ""
        stdout.print(f"{entry.path}{suffix}  [dim]{entry.summary}[/]", highlight=False)


@click.command()
@config_option
@json_option
@click.argument("query")
@click.option("--k", "k", default=5, show_default=True, type=click.IntRange(1, 100), help="How many results.")
@click.option(
    "--detail",
    type=click.Choice(["name", "summary", "full"]),
    default="summary",
    show_default=True,
    help="name: the import path; summary: + one line; full: signature and docstring.",
)
@click.option("--principal", help="Search only what this principal may use.")
@live_option
@handle_errors
def search(
    config_path: Path | None,
    as_json: bool,
    query: str,
    k: int,
    detail: Literal["name", "summary", "full"],
    principal: str | None,
    live: bool,
) -> None:
    """Find tools for a task, in plain words ("close a ticket", "customer email").

    Searches the approved tools in codemode.lock (no server is started) unless --live. The index
    is cached (in $XDG_CACHE_HOME/codemode/search) until the lock, the policy or the ranker changes.
    Ranks with BM25, fused with embeddings when [search] semantic (or CODEMODE_SEARCH_SEMANTIC) says
    so; each JSON result's "ranker" says which ("bm25" or "hybrid").
    """
    config = load(config_path)
    results: list[dict[str, Any]]
    if live or detail == "full":  # full detail renders the stubs, so the cache would save nothing
        setting, embedder = ranking(config)
        ranker = "hybrid" if embedder is not None else "bm25"
        semantic: SemanticChoice = setting if embedder is not None else "off"
        view = principal_view(config, load_tree(config, live, semantic), principal)
        results = [dataclasses.asdict(r) for r in view.search(query, k=k, detail=detail)]
    else:
        found = cached_search(config, principal)
        ranker = found.ranker
        results = [
            {
                "server": row.server,
                "tool": row.tool,
                "module": row.module,
                "path": row.path,
                "import_line": row.import_line,
                "score": score,
                "detail": detail,
                "text": row.module if detail == "name" else row.summary,
            }
            for row, score in found.search(query, k)
        ]
    for result in results:
        result["ranker"] = ranker  # per result, so the list stays what scripts already read
    if as_json:
        print_json(results)
        return
    # On stderr: stdout stays one result per line for scripts.
    stderr.print(f"[dim]ranked by {ranker}[/]", markup=True, highlight=False)
    if not results:
        stdout.print("no matching tools", highlight=False)
    for result in results:
        stdout.print(result["text"], highlight=False, markup=False)
        if detail == "full":
            stdout.print("")
