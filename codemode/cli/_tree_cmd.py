"""``codemode tree`` and ``codemode search``: browse the stub tree the model sees."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import click

from codemode.cli import _common
from codemode.cli._common import (
    EXIT_FAILURE,
    config_option,
    fail,
    handle_errors,
    json_option,
    load,
    print_json,
    warn,
)

if TYPE_CHECKING:
    from codemode.catalog import ServerCatalog
    from codemode.config import Config, SemanticChoice
    from codemode.search import CachedSearch, Embedder
    from codemode.stubs import TreePathError, VirtualTree

# ``codemode search`` from a cached index imports none of the catalog, stub, config or broker modules
# (nor rich, for --json): in a fresh process those imports alone cost more than the whole cached
# search. See codemode.cli._search_cache.

# A first build embedding fewer tools than this is over in a few seconds: no bar for it.
_BAR_FROM = 64

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
    """``[search] semantic`` as the engine reads it and the model to rank with (see
    :func:`codemode.cli._search_cache.ranking_for`)."""
    from codemode.cli._search_cache import ranking_for

    return ranking_for(config.search.semantic)


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


def with_skills(
    config: Config,
    approved: VirtualTree | Callable[[], VirtualTree],
    view: Callable[[VirtualTree], VirtualTree],
    principal: str | None,
    tenant: str | None,
) -> VirtualTree | None:
    """The ``view`` of the ``approved`` tree with ``skills/``: the saved skills a run of
    ``principal`` in ``tenant`` is offered, as the engine offers them; None when the tenant has no
    approved skill (nor a ledger yet: nothing was ever saved), before ``approved`` is rendered."""
    from codemode.errors import NoLedgerError
    from codemode.ledger import open_ledger
    from codemode.skills import offered_skills

    who, where = config.policy.identity(principal, tenant)
    location = config.ledger_location()
    try:
        ledger = open_ledger(location, create=False, recover=False)
    except NoLedgerError:  # no file, or a database no run has written to yet
        return None
    with ledger:
        rules = config.policy.principal(who)
        if rules is None or where not in rules.tenants or not ledger.skills.active(where):
            return None  # as offered_skills decides, without rendering the tree for it
        tree = approved() if callable(approved) else approved
        shown = view(tree)
        modules = offered_skills(ledger.skills, tree, shown, config.policy, who, where)
    return shown.with_skills(modules) if modules else None


def principal_view(config: Config, tree: VirtualTree, principal: str | None) -> VirtualTree:
    from codemode.broker import reads_visible_to, visible_to

    if principal is None:
        return tree
    return tree.restrict(visible_to(config.policy, principal), reads_visible_to(config.policy, principal))


def build_search(
    config: Config, principal: str | None, setting: SemanticChoice, embedder: Embedder | None
) -> CachedSearch:
    """The index of what ``principal`` may use and the rows it returns, built from the lock."""
    from codemode.search import CachedRow, CachedSearch

    # "off" when the model is missing: the warning is printed already, once.
    semantic: SemanticChoice = setting if embedder is not None else "off"
    view = principal_view(config, load_tree(config, semantic=semantic), principal)
    with embedding_bar(sys.stderr.isatty()):
        index, results = view.search_snapshot()
    rows = {
        module: CachedRow(r.server, r.tool, r.module, r.path, r.import_line, r.text)
        for module, r in results.items()
    }
    return CachedSearch(index, rows)


@contextlib.contextmanager
def embedding_bar(show: bool) -> Generator[None]:
    """A progress bar on stderr while the block embeds many tools (a first build with a model: e5
    takes minutes for thousands of tools), gone when done; nothing when ``show`` is false."""
    from codemode.search import embedding_progress

    if not show:
        yield
        return
    bars: list[Any] = []  # the bar and its task, made on the first long report (rich loads then)

    def report(done: int, total: int) -> None:
        if total < _BAR_FROM:
            return
        if not bars:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            bar = Progress(
                TextColumn("embedding tools for search (once: cached after)"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=_common.console(True),
                transient=True,
            )
            bar.start()
            bars.extend((bar, bar.add_task("embedding", total=total)))
        bars[0].update(bars[1], completed=done, total=total)

    try:
        with embedding_progress(report):
            yield
    finally:
        if bars:
            bars[0].stop()


def _note_setup(config: Config) -> None:
    """Say on stderr why servers the config names are missing from the tree, and what to run."""
    from codemode.catalog import load_lock
    from codemode.cli._setup_state import setup_gap, waiting_note

    lock = load_lock(config.lock_path)
    gap = setup_gap(config, lock)
    note = (gap.message, gap.hint) if gap is not None else waiting_note(config, lock)
    if note is not None:
        warn(note[0], hint=note[1])


def _missing_path(config: Config, path: str, error: TreePathError) -> NoReturn:
    """``servers/<server>...`` of a configured server without approved tools says which step is
    missing; any other path is simply not in the tree."""
    from codemode.catalog import load_lock
    from codemode.cli._setup_state import command, readiness, setup_gap, waiting_for_review
    from codemode.stubs import NameKind, assign_identifiers

    parts = [part for part in path.split("/") if part not in ("", ".")]
    lock = load_lock(config.lock_path)
    gap = setup_gap(config, lock)
    standing = {s.server: s for s in readiness(config, lock)}
    idents = assign_identifiers(standing, NameKind.SERVER, where="configured servers")
    server = next((name for name, ident in idents.items() if parts[1:2] in ([ident], [name])), None)
    if parts[:1] == ["servers"] and server is not None and not standing[server].approved:
        found = standing[server]
        if not found.synced:
            fail(f"{path}: {server} was never synced", hint=f"run '{command(config, 'sync')}'")
        if not found.pending:
            fail(
                f"{path}: {server} listed no tools at the last sync",
                hint=f"'{command(config, 'servers')}' shows its status",
            )
        approve = command(config, f"pin --approve {server}")
        fail(
            f"{path}: {server} has no approved tools ({waiting_for_review(found.pending)})",
            hint=f"review them with '{command(config, 'pin')}', then approve them with '{approve}'",
        )
    if gap is not None:
        fail(f"{error} ({gap.message})", hint=gap.hint)
    fail(str(error), hint=f"run '{command(config, 'tree')}' to see what exists")


@click.command()
@config_option
@json_option
@click.argument("path", default="", metavar="[PATH]")
@click.option("--principal", help="Show the tree as this principal sees it.")
@click.option("--tenant", help="With the saved skills of this tenant [default: policy.default_tenant].")
@live_option
@handle_errors
def tree(
    config_path: Path | None, as_json: bool, path: str, principal: str | None, tenant: str | None, live: bool
) -> None:
    """List a directory of the stub tree, or print a file.

    \b
    codemode tree                          servers/ and the runtime stub
    codemode tree servers/crm              the crm tools, one line each
    codemode tree servers/crm/get_customer.py

    Only approved tools appear (see 'codemode pin'); read from codemode.lock unless --live. When a
    configured server has none (never synced, or its tools wait for review), the listing of the
    root or of servers/ says so on stderr, with the command to run next; the JSON stays a list.
    """
    from codemode.search import semantic_setting
    from codemode.stubs import TreePathError

    config = load(config_path)
    # The setting only, not the model: listing and reading never search, so nothing is embedded.
    approved = load_tree(config, live, semantic_setting(config.search.semantic))
    view = with_skills(
        config, approved, functools.partial(principal_view, config, principal=principal), principal, tenant
    )
    view = view or principal_view(config, approved, principal)
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
        _missing_path(config, path, exc)
    if path.strip("/") in ("", ".", "servers"):
        _note_setup(config)
    if as_json:
        print_json([{"path": e.path, "kind": e.kind, "name": e.name, "summary": e.summary} for e in entries])
        return
    from rich.markup import escape

    from codemode._text import escape_invisible

    for entry in entries:
        suffix = "/" if entry.kind == "directory" else ""
        # The summary is server text (a tool's description): printed as text, never as markup, so
        # "[/]" cannot crash the listing nor "[link=...]" hide a hyperlink in it.
        path, summary = (escape(escape_invisible(text)) for text in (entry.path + suffix, entry.summary))
        _common.stdout.print(f"{path}  [dim]{summary}[/]", highlight=False)


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
@click.option("--tenant", help="With the saved skills of this tenant [default: policy.default_tenant].")
@live_option
@handle_errors
def search(
    config_path: Path | None,
    as_json: bool,
    query: str,
    k: int,
    detail: Literal["name", "summary", "full"],
    principal: str | None,
    tenant: str | None,
    live: bool,
) -> None:
    """Find tools and saved skills for a task, in plain words ("close a ticket", "customer email").

    Searches the approved tools in codemode.lock (no server is started) unless --live, and the
    saved skills the principal is offered in the tenant (a hit shows 'from skills.<name> import
    <function>'; each JSON result's "kind" is "tool" or "skill"). The tools' index is cached (in
    $XDG_CACHE_HOME/codemode/search) until the lock, the policy or the ranker changes; skills are
    read from the ledger on each search, so a revoked one is gone at once. Ranks with BM25, fused
    with embeddings when [search] semantic (or CODEMODE_SEARCH_SEMANTIC) says so; each JSON
    result's "ranker" says which ("bm25" or "hybrid").

    \b
    Exit status:
      0  results, or none matched (--json: a list, maybe empty; a hint goes to stderr)
      1  nothing to search: no server configured, nothing synced or no tool approved yet
         (--json: {"results": [], "state": "no-servers" | "not-synced" | "not-approved",
         "error": "...", "hint": "the command to run next"})
    """
    results: list[dict[str, Any]]
    loaded: list[Config] = []  # the config, once loaded: an empty answer reads it again

    def load_once(path: Path | None) -> Config:
        if not loaded:
            loaded.append(load(path))
        return loaded[0]

    from codemode.cli._search_cache import cached_search, may_hold_skills

    found = None
    if not (live or detail == "full"):  # full detail renders the stubs: the cache would save nothing
        # The cached index first: it loads the config (if it must) in the way that files its memo
        # safely; saved skills are never in it, so a principal offered some is searched here.
        found = cached_search(config_path, principal, build_search, load=load_once)
    here = None
    if found is None or may_hold_skills(config_path, principal):
        here = _search_here(load_once(config_path), principal, tenant, live, everything=found is None)
    if here is not None:
        view, ranker = here
        with embedding_bar(sys.stderr.isatty()):
            results = [dataclasses.asdict(r) for r in view.search(query, k=k, detail=detail)]
    else:
        assert found is not None
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
                "kind": "tool",  # the cached index holds tools only
            }
            for row, score in found.search(query, k)
        ]
    for result in results:
        result["ranker"] = ranker  # per result, so the list stays what scripts already read
    # Only an empty answer loads the config and the lock (a cached search needs neither): it says
    # which step is missing, or else how to search differently.
    notes = _no_results(load_once(config_path), principal, as_json) if not results else []
    if as_json:
        print_json(results)
    else:
        # On stderr: stdout stays one result per line for scripts.
        _common.stderr.print(f"[dim]ranked by {ranker}[/]", markup=True, highlight=False)
        stdout = _common.stdout
        if not results:
            stdout.print("no matching tools", highlight=False)
        for result in results:
            stdout.print(result["text"], highlight=False, markup=False)
            if detail == "full":
                stdout.print("")
    for message, hint in notes:
        warn(message, hint=hint)


def _search_here(
    config: Config, principal: str | None, tenant: str | None, live: bool, *, everything: bool
) -> tuple[VirtualTree, str] | None:
    """The view to search in this process, with the saved skills ``principal`` is offered in
    ``tenant``, and its ranker's name; None when no skill is offered, unless ``everything``
    (--live, full detail). Skills are never in the cached index: it would be filed for another
    tenant's search and outlive a revocation. Only a principal offered skills renders the tree."""
    from codemode.errors import PolicyError

    rankers: list[str] = []

    def approved() -> VirtualTree:
        setting, embedder = ranking(config)
        rankers.append("hybrid" if embedder is not None else "bm25")
        return load_tree(config, live, setting if embedder is not None else "off")

    def visible(tree: VirtualTree) -> VirtualTree:
        return principal_view(config, tree, principal)

    try:
        view = with_skills(config, approved, visible, principal, tenant)
    except PolicyError:  # an unknown principal is offered no skill; its search says the rest
        view = None
    if view is None and everything:
        view = visible(approved())
    return (view, rankers[0]) if view is not None else None


def _no_results(config: Config, principal: str | None, as_json: bool) -> list[tuple[str, str]]:
    """Why a search found nothing. A missing step ends the command (status 1, naming the command
    to run next); otherwise ``(message, hint)`` notes: search differently, and which servers are
    not ready yet."""
    from codemode.catalog import load_lock
    from codemode.cli._setup_state import command, setup_gap, waiting_note

    lock = load_lock(config.lock_path)
    gap = setup_gap(config, lock)
    if gap is not None:
        if as_json:
            print_json({"results": [], **gap.to_json()})
            sys.exit(EXIT_FAILURE)
        fail(gap.message, hint=gap.hint)
    hint = f"try fewer or other words, or list the tools with '{command(config, 'tree servers')}'"
    if principal is not None:
        hint += f" (this searched only what principal {principal!r} may use)"
    waiting = waiting_note(config, lock)
    return [("no tool matched", hint), *([waiting] if waiting is not None else [])]
