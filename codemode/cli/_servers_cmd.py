"""``codemode servers``, ``codemode sync`` and ``codemode pin``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from codemode._text import escape_invisible
from codemode.catalog import (
    Pins,
    ServerCatalog,
)
from codemode.cli._common import (
    config_option,
    handle_errors,
    json_option,
    load,
    print_json,
    progress,
    stderr,
    stdout,
)
from codemode.cli._signals import run_until_signalled
from codemode.config import Config
from codemode.host import ConnectionState, McpHost, ServerStatus


def plain(text: object) -> str:
    """``text`` (server-controlled: names, versions, errors, stderr) as rich markup that prints
    it literally: control and invisible characters shown as ``\\uXXXX`` escapes (so no terminal
    escape sequence gets through), and brackets escaped so it is never read as markup."""
    return escape(escape_invisible(str(text)))


async def _connect_and_collect(
    config: Config, show_progress: bool
) -> tuple[list[ServerStatus], list[ServerCatalog]]:
    count = len(config.enabled_servers())
    label = f"connecting to {count} server{'s' if count != 1 else ''}…"
    with progress(label, show_progress):
        async with McpHost(config) as host:
            return host.statuses(), host.catalogs()


def _status_json(status: ServerStatus) -> dict[str, Any]:
    return status.model_dump(mode="json")


def _state_style(state: ConnectionState) -> str:
    return {
        ConnectionState.READY: "green",
        ConnectionState.FAILED: "red",
        ConnectionState.DISABLED: "dim",
    }.get(state, "yellow")


def _print_failures(statuses: list[ServerStatus]) -> None:
    for status in statuses:
        if status.state is ConnectionState.FAILED:
            stderr.print(
                f"[red]✗ {plain(status.name)}[/] ({plain(status.target)}): {plain(status.error)}",
                highlight=False,
            )
            if status.stderr_tail:
                lines = status.stderr_tail.splitlines()[-10:]
                tail = "\n".join("    " + plain(line) for line in lines)
                stderr.print(f"  [dim]last stderr lines:[/]\n{tail}", highlight=False)


@click.command()
@config_option
@json_option
@handle_errors
def servers(config_path: Path | None, as_json: bool) -> None:
    """Connect to every configured server and show its status.

    Shows each server's transport, state, negotiated protocol version and era, tool count and,
    for a failure, the reason and the tail of its stderr. Exit status 1 if any server failed.
    """
    config = load(config_path)
    statuses, _ = run_until_signalled(_connect_and_collect, config, not as_json and sys.stderr.isatty())
    if as_json:
        print_json({"config": config.source, "servers": [_status_json(s) for s in statuses]})
    else:
        table = Table(show_edge=False, header_style="bold")
        for column in ("server", "transport", "state", "protocol", "tools", "server says it is"):
            table.add_column(column)
        for status in statuses:
            info = status.server_info or {}
            says = f"{info.get('name', '')} {info.get('version', '')}".strip()
            table.add_row(
                plain(status.name),
                plain(status.transport),
                f"[{_state_style(status.state)}]{status.state.value}[/]",
                plain(f"{status.protocol_version} ({status.era})") if status.protocol_version else "-",
                str(status.tool_count)
                + (f" (+{status.excluded_count} excluded)" if status.excluded_count else ""),
                plain(says) or "-",
            )
        stdout.print(table)
        _print_failures(statuses)
    if any(s.state is ConnectionState.FAILED for s in statuses):
        sys.exit(1)


@click.command()
@config_option
@json_option
@click.option(
    "--export",
    "export_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write the stub tree of approved tools to DIR (servers/ + codemode_runtime.pyi).",
)
@handle_errors
def sync(config_path: Path | None, as_json: bool, export_dir: Path | None) -> None:
    """Connect, list every server's tools and record them in codemode.lock.

    Prints the tools added, changed and removed since the last sync. New and changed tools are
    NOT usable until approved with 'codemode pin --approve'; removed tools fail closed. A server
    that fails to connect keeps its previous pins untouched. Exit status 1 if any server failed.

    With --export DIR the stubs of the approved tools are written to DIR, e.g. to read them,
    type-check them, or give them to an editor.
    """
    config = load(config_path)
    statuses, catalogs = run_until_signalled(
        _connect_and_collect, config, not as_json and sys.stderr.isatty()
    )
    diffs = Pins(config.lock_path).record_all(catalogs, save_unchanged=True)
    excluded = [e.model_dump() for c in catalogs for e in c.excluded]
    exported: str | None = None
    if export_dir is not None:
        from codemode.stubs import render_tree

        tree = render_tree(Pins(config.lock_path).usable(catalogs))
        exported = str(tree.export(export_dir))
    if as_json:
        print_json(
            {
                "config": config.source,
                "lock_file": str(config.lock_path),
                "servers": [_status_json(s) for s in statuses],
                "changes": [d.to_json() for d in diffs],
                "excluded": excluded,
                "exported_to": exported,
            }
        )
    else:
        for diff in diffs:
            stdout.print(f"[bold]{plain(diff.server)}[/]: {len(diff.unchanged)} unchanged", highlight=False)
            for label, names, style in (
                ("added", diff.added, "green"),
                ("changed", diff.changed, "yellow"),
                ("removed", diff.removed, "red"),
            ):
                for name in names:
                    stdout.print(f"  [{style}]{label:8}[/] {plain(name)}", highlight=False)
        for item in excluded:
            stderr.print(
                f"[yellow]excluded[/] {plain(item['server'])}/{plain(item['name'])}: {plain(item['reason'])}",
                highlight=False,
            )
        _print_failures(statuses)
        pending = sum(len(d.pending) for d in diffs)
        stdout.print(f"wrote {config.lock_path}", highlight=False, markup=False)
        if exported:
            stdout.print(f"exported the stub tree to {exported}", highlight=False, markup=False)
        if pending:
            stdout.print(
                f"{pending} tool{'s' if pending != 1 else ''} await approval: review with 'codemode pin', "
                "approve with 'codemode pin --approve [SERVER[/TOOL]]' (add --accept-hints to rate "
                "read-only tools by their own readOnlyHint, so reads need no approval)",
                highlight=False,
                markup=False,
            )
    if any(s.state is ConnectionState.FAILED for s in statuses):
        sys.exit(1)
