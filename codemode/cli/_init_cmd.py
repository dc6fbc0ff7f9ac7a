"""``codemode init``: write a starter config, optionally importing an mcpServers JSON file."""

from __future__ import annotations

from pathlib import Path

import click

from codemode.cli._common import config_option, fail, handle_errors, stderr, stdout
from codemode.config import ServerEntry, default_config_path, demo_servers, import_mcp_servers, starter_config


@click.command()
@config_option
@click.option(
    "--from",
    "from_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Import servers from an mcpServers JSON file (Claude Desktop config, .mcp.json, VS Code mcp.json).",
)
@click.option("--demo", is_flag=True, help="Configure the bundled example servers (docs, crm, tickets).")
@click.option("--force", is_flag=True, help="Overwrite an existing config file.")
@click.option(
    "--strict", is_flag=True, help="With --from: fail if an entry has keys codemode does not understand."
)
@handle_errors
def init(config_path: Path | None, from_file: Path | None, demo: bool, force: bool, strict: bool) -> None:
    """Write a commented starter codemode.toml.

    \b
    Examples:
      codemode init                                  # commented template
      codemode init --from ~/.config/Claude/claude_desktop_config.json
      codemode init --from .vscode/mcp.json --config work/codemode.toml
      codemode init --demo                           # the bundled example servers
    """
    target = default_config_path(config_path)
    if target.exists() and not force:
        fail(f"{target} already exists", hint="pass --force to overwrite it, or --config to write elsewhere")
    if from_file is not None and demo:
        fail("--from and --demo cannot be combined")
    servers: dict[str, ServerEntry] = {}
    comments: dict[str, str] = {}
    if from_file is not None:
        # Imported here, not at the top: the network guard is needed only by --from.
        from codemode.net import needs_loopback

        imported = import_mcp_servers(from_file, needs_loopback=needs_loopback)
        servers, comments = imported.servers, imported.comments
        for warning in imported.warnings:
            stderr.print(f"[yellow]warning:[/] {warning}", highlight=False)
        if strict and imported.unknown_keys:
            listed = "; ".join(f"{name}: {', '.join(keys)}" for name, keys in imported.unknown_keys.items())
            fail(
                f"unknown keys in {from_file} ({listed})",
                hint="fix or remove them, or import without --strict",
            )
        if imported.secrets_to_set:
            stderr.print(
                "Set these environment variables before 'codemode sync': "
                + ", ".join(imported.secrets_to_set)
            )
        if not servers:
            fail(f"{from_file} defines no server codemode can use")
    elif demo:
        servers = demo_servers()
        comments = dict.fromkeys(servers, "bundled example server")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(starter_config(servers, comments), encoding="utf-8")
    stdout.print(f"wrote {target} ({len(servers)} server{'s' if len(servers) != 1 else ''})", highlight=False)
    stdout.print(
        "next: 'codemode sync' to connect and list tools, then 'codemode pin --approve'", highlight=False
    )
