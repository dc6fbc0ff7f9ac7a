"""Root of the ``codemode`` command group. Each sub-command lives in its own module."""

from __future__ import annotations

import importlib
import os

import click

from codemode._otel_export import ENDPOINT_VARIABLES, export_from_environment

# name -> (module, attribute, one-line help). A command's module is imported only when that
# command runs (or its own --help is asked for): `codemode --version` and `codemode --help`
# import none of them, and `codemode ledger list` never imports the MCP SDK or Docker.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("_demo_cmd", "demo", "Run codemode end to end on the bundled example servers."),
    "init": ("_init_cmd", "init", "Write a commented starter codemode.toml (or --from an mcpServers file)."),
    "servers": ("_servers_cmd", "servers", "Connect to every configured server and show its status."),
    "sync": ("_servers_cmd", "sync", "Connect, list every server's tools and record them in codemode.lock."),
    "auth": ("_auth_cmd", "auth", "Sign in to remote servers that use OAuth (login, status, logout)."),
    "pin": ("_pin_cmd", "pin", "Review and approve tool pins in codemode.lock."),
    "tree": ("_tree_cmd", "tree", "List a directory of the stub tree, or print a file."),
    "search": ("_tree_cmd", "search", "Find tools for a task, in plain words."),
    "run": ("_run_cmd", "run", "Run a Python program in the sandbox against the configured servers."),
    "batch": ("_batch_cmd", "batch", "Run a program once per item of a .jsonl or .csv file."),
    "approve": (
        "_approve_cmd",
        "approve",
        "Pre-issue a single-use approval for one call with exactly these arguments.",
    ),
    "skill": ("_skill_cmd", "skill", "Save, review and approve skills: programs kept as importable modules."),
    "ledger": ("_ledger_cmd", "ledger", "Inspect, verify and reconcile the operation ledger."),
    "sandbox": ("_sandbox_cmd", "sandbox", "Build and check the sandbox that runs programs."),
    "serve": ("_serve_cmd", "serve", "Serve the run_code tool as an MCP server (stdio or HTTP)."),
    "bench": ("_bench_cmd", "bench", "Token-cost experiments: direct tool calling against code mode."),
    "workspace": ("_workspace_cmd", "workspace", "List, fetch and remove the files that outlive a run."),
}


class LazyGroup(click.Group):
    """A group whose sub-commands are imported on first use (see :data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attribute, _ = entry
        command = getattr(importlib.import_module(f"codemode.cli.{module}"), attribute)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The listing uses the one-line help above, so --help imports no command module.
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_text) for name, (_, _, help_text) in COMMANDS.items()])


def _print_version(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    """``--version``, as ``click.version_option`` prints it, but the version is looked up only when
    asked for: importlib.metadata costs ~20 ms, which every other command would pay at import."""
    if not value or ctx.resilient_parsing:
        return
    from codemode._version import codemode_version

    click.echo(f"codemode, version {codemode_version()}", color=ctx.color)
    ctx.exit()


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
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

    \b
    Tracing: with OTEL_EXPORTER_OTLP_ENDPOINT set (and pip install 'codemode[otel]'), each
    run and tool call is exported as OpenTelemetry spans.
    """
    if any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
        from codemode.cli._common import EXIT_USAGE, fail
        from codemode.errors import CodemodeError

        try:
            export_from_environment()
        except CodemodeError as exc:
            fail(str(exc), code=EXIT_USAGE)


def main() -> None:
    cli(prog_name="codemode")
