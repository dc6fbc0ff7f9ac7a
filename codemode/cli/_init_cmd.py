"""``codemode init``: write a starter config, optionally importing an mcpServers JSON file."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
from rich.markup import escape

from codemode.cli._common import config_option, fail, handle_errors, stderr, stdout, warn
from codemode.config import (
    ServerEntry,
    default_config_path,
    demo_servers,
    import_mcp_servers,
    no_servers_hint,
    starter_config,
)
from codemode.errors import ConfigError


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
        if strict and imported.unknown_key_problems:
            # Worded as a codemode.toml with unknown keys is (location, "did you mean ..."): exit 2.
            raise ConfigError(str(from_file), imported.unknown_key_problems)
        for warning in imported.warnings:
            warn(warning)
        if imported.secrets_to_set:
            stderr.print(
                "Set these environment variables before 'codemode sync': "
                + ", ".join(imported.secrets_to_set)
            )
        if not servers:
            fail(
                f"{from_file} defines no server codemode can use",
                hint="its 'mcpServers' (or VS Code 'servers') object needs a server with a 'command' or a "
                "'url'; or run 'codemode init' without --from for a commented template",
            )
        if imported.unknown_keys:
            left_out = (
                f"the keys above were left out (a comment in {target} names each); fix them in "
                f"{from_file} and import again with --force, or pass --strict to refuse them"
            )
            stderr.print(f"[dim]hint:[/] {escape(left_out)}", highlight=False)
    elif demo:
        servers = demo_servers()
        comments = dict.fromkeys(servers, "bundled example server")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(starter_config(servers, comments), encoding="utf-8")
    stdout.print(f"wrote {target} ({len(servers)} server{'s' if len(servers) != 1 else ''})", highlight=False)
    flags = "" if config_path is None else f" --config {shlex.quote(str(target))}"
    if not servers:
        # A template alone connects to nothing: say how to get a first server, not "sync".
        hint = no_servers_hint(str(target), command_flags=flags.strip())
        stdout.print(f"next: {hint}", highlight=False, markup=False)
        return
    stdout.print(
        f"next: 'codemode sync{flags}' to connect and list tools, then 'codemode pin{flags}' to review them "
        f"and 'codemode pin --approve{flags}' to approve them",
        highlight=False,
        markup=False,
    )
