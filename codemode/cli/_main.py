"""Root of the ``codemode`` command group. Each sub-command lives in its own module."""

from __future__ import annotations

import click

from codemode._version import codemode_version
from codemode.cli import (
    _batch_cmd,
    _demo_cmd,
    _init_cmd,
    _ledger_cmd,
    _run_cmd,
    _sandbox_cmd,
    _serve_cmd,
    _servers_cmd,
    _tree_cmd,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(codemode_version(), prog_name="codemode")
def cli() -> None:
    """codemode: let an AI agent use many MCP servers by writing code.

    codemode connects to the MCP servers in codemode.toml, renders their tools as typed Python
    stubs, and runs the model's programs in a sandbox where every tool call passes a broker
    that checks identity, pins, scope, consent and budgets.

    \b
    Start here:
      codemode demo              the whole path on bundled example servers (nothing to set up)
      codemode init              write a starter codemode.toml (or --from an mcpServers JSON)
      codemode sync              connect, list tools, write codemode.lock
      codemode pin --approve     approve new or changed tools
      codemode run prog.py       run a program in the sandbox against the servers
      codemode batch prog.py     run a program once per item of a .jsonl/.csv file
      codemode serve             be an MCP server with the single run_code tool
      codemode sandbox doctor    check the sandbox engine and image
    """


for command in (
    _demo_cmd.demo,
    _init_cmd.init,
    _servers_cmd.servers,
    _servers_cmd.sync,
    _servers_cmd.pin,
    _tree_cmd.tree,
    _tree_cmd.search,
    _run_cmd.run,
    _batch_cmd.batch,
    _run_cmd.approve,
    _ledger_cmd.ledger,
    _sandbox_cmd.sandbox,
    _serve_cmd.serve,
):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="codemode")
