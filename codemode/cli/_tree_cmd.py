"""``codemode tree`` and ``codemode search``: browse the stub tree the model sees."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import click

from codemode.broker._visibility import visible_to
from codemode.catalog import ServerCatalog, ToolSpec, load_lock
from codemode.cli._common import config_option, fail, handle_errors, json_option, load, print_json, stdout
from codemode.config import Config
from codemode.stubs import TreePathError, VirtualTree, render_tree

live_option = click.option(
    "--live",
    is_flag=True,
    help="Connect to the servers instead of reading codemode.lock (adds resources and prompts, and "
    "shows only tools the servers still list unchanged).",
)


def approved_catalogs(config: Config) -> list[ServerCatalog]:
    """The approved tools as codemode.lock holds them: no server is started, nothing is fetched."""
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


def load_tree(config: Config, live: bool = False) -> VirtualTree:
    """The stubs of approved tools (what programs may import), from the lock or, live, the servers."""
    if not live:
        return render_tree(approved_catalogs(config))
    from codemode.catalog import Pins
    from codemode.cli._signals import run_until_signalled
    from codemode.host import McpHost

    async def listed() -> list[ServerCatalog]:
        async with McpHost(config) as host:
            return host.catalogs()

    return render_tree(Pins(config.lock_path).usable(run_until_signalled(listed)))


def principal_view(config: Config, tree: VirtualTree, principal: str | None) -> VirtualTree:
    return tree if principal is None else tree.restrict(visible_to(config.policy, principal))


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
    config = load(config_path)
    view = principal_view(config, load_tree(config, live), principal)
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

    Searches the approved tools in codemode.lock (no server is started) unless --live.
    """
    config = load(config_path)
    view = principal_view(config, load_tree(config, live), principal)
    results = view.search(query, k=k, detail=detail)
    if as_json:
        print_json([dataclasses.asdict(r) for r in results])
        return
    if not results:
        stdout.print("no matching tools", highlight=False)
    for result in results:
        stdout.print(result.text, highlight=False, markup=False)
        if detail == "full":
            stdout.print("")
