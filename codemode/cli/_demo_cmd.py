"""``codemode demo``: the whole path on the bundled example servers, with nothing to set up."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import click
from rich.table import Table

from codemode._resources import resource_dir
from codemode._tokens import count_json_tokens
from codemode.catalog import Pins, ServerCatalog
from codemode.cli._common import BACKEND_CHOICE, handle_errors, json_option, print_json, stderr, stdout
from codemode.cli._signals import run_until_signalled
from codemode.config import BackendChoice, demo_servers, load_config, starter_config
from codemode.engine import CodeMode, RunResult, definitions
from codemode.host import ConnectionState, McpHost

DEMO_PROGRAM = "renewal_risk.py"


def _write_config(directory: Path, backend: str) -> Path:
    config_path = directory / "codemode.toml"
    text = starter_config(demo_servers(), dict.fromkeys(("docs", "crm", "tickets"), "bundled example server"))
    text = text.replace("[sandbox]\n", f'[sandbox]\nbackend = "{backend}"\n', 1)
    config_path.write_text(text, encoding="utf-8")
    return config_path


async def _sync_and_approve(config_path: Path) -> list[ServerCatalog]:
    config = load_config(config_path)
    async with McpHost(config) as host:
        failed = [s for s in host.statuses() if s.state is ConnectionState.FAILED]
        if failed:
            raise click.ClickException("; ".join(f"{s.name}: {s.error}" for s in failed))
        catalogs = host.catalogs()
    pins = Pins(config.lock_path)
    pins.record_all(catalogs)
    # Only the demo approves blindly: these are codemode's own bundled servers. For your servers,
    # review what 'codemode sync' lists and approve with 'codemode pin --approve'.
    pins.approve()
    return catalogs


async def _run_demo(config_path: Path, program: str) -> tuple[RunResult, str]:
    async with CodeMode.from_file(config_path, measure_tokens=True) as engine:
        result = await engine.run(program)
        return result, engine.backend


def _token_figures(catalogs: list[ServerCatalog], result: RunResult) -> dict[str, Any]:
    # What direct tool calling puts in every request: each tool's name, description and schema.
    direct_definitions = [
        {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
        for c in catalogs
        for t in c.tools
    ]
    tools = sum(len(c.tools) for c in catalogs)
    run_code = definitions("mcp", servers={c.server: len(c.tools) for c in catalogs}, navigation=False)
    return {
        "estimate": True,  # not measured: 'codemode bench tokens' runs both modes for real
        "tools": tools,
        "tool_definitions_tokens_direct": count_json_tokens(direct_definitions),
        "tool_definitions_tokens_codemode": count_json_tokens(run_code),
        "tool_result_tokens_direct": result.tool_result_tokens,
        "final_result_tokens_codemode": result.final_tokens,
        "program_tokens": count_json_tokens(_program_text()),
    }


def _program_text() -> str:
    return (resource_dir("example_programs") / DEMO_PROGRAM).read_text(encoding="utf-8")


@click.command()
@json_option
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the demo workspace (config, lock, ledger) here [default: a temporary directory].",
)
@click.option(
    "--backend",
    type=BACKEND_CHOICE,
    default="auto",
    show_default=True,
    help="Sandbox backend (auto: Docker when an engine and the image are there, else bwrap, else process).",
)
@handle_errors
def demo(as_json: bool, directory: Path | None, backend: BackendChoice) -> None:
    """Run codemode end to end on the bundled example servers, with nothing to set up.

    Starts the docs, crm and tickets example servers, records and approves their tools, then
    runs examples/programs/renewal_risk.py in the sandbox: it joins a 500-row renewals sheet,
    12,480 sales rows and the open tickets of every at-risk customer, and returns five rows.
    Prints that result and an estimate of its token cost compared with calling the tools
    directly ('codemode bench tokens' measures both modes for real).
    """
    program = _program_text()
    with tempfile.TemporaryDirectory(prefix="codemode-demo-") as scratch:
        workspace = directory or Path(scratch)
        workspace.mkdir(parents=True, exist_ok=True)
        config_path = _write_config(workspace, backend)
        with stderr.status("starting the example servers and recording their tools…"):
            catalogs = run_until_signalled(_sync_and_approve, config_path)
        with stderr.status(f"running {DEMO_PROGRAM} in the sandbox…"):
            result, used_backend = run_until_signalled(_run_demo, config_path, program)
        figures = _token_figures(catalogs, result)
        if as_json:
            print_json(
                {
                    "workspace": str(workspace),
                    "backend": used_backend,
                    "run": result.to_json(),
                    "tokens": figures,
                }
            )
            return
        _print_report(result, used_backend, figures, workspace if directory else None)
    if result.status != "ok":
        raise SystemExit(1)


def _print_report(result: RunResult, backend: str, figures: dict[str, Any], kept: Path | None) -> None:
    stdout.print(f"[bold]codemode demo[/] - {DEMO_PROGRAM} on the docs, crm and tickets example servers\n")
    if result.status == "ok" and isinstance(result.result, list):
        rows = [cast(dict[str, Any], r) for r in result.result if isinstance(r, dict)]
        table = Table(header_style="bold", show_edge=False)
        columns: list[str] = list(rows[0]) if rows else []
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(str(v) for v in row.values()))
        stdout.print(table)
    else:
        stdout.print(json.dumps(result.result, indent=2, ensure_ascii=False), markup=False)
        if result.error:
            stderr.print(f"[red]{result.error.type}: {result.error.message}[/]", highlight=False)
    stdout.print(
        f"\n{result.status} · {result.calls} tool calls through the broker · {result.denials} denied · "
        f"{result.duration_ms / 1000:.1f} s · sandbox backend: {backend}",
        highlight=False,
    )
    direct = (figures["tool_definitions_tokens_direct"] or 0) + (figures["tool_result_tokens_direct"] or 0)
    mode = (
        (figures["tool_definitions_tokens_codemode"] or 0)
        + (figures["program_tokens"] or 0)
        + (figures["final_result_tokens_codemode"] or 0)
    )
    # An estimate: definitions once plus each result passing through the model once. The measured
    # figures, with both modes really run and every request re-sending the conversation, come
    # from `codemode bench tokens`.
    table = Table(
        title="ESTIMATED tokens a model would see (cl100k_base)", header_style="bold", show_edge=False
    )
    table.add_column("")
    table.add_column("direct tool calls", justify="right")
    table.add_column("codemode", justify="right")
    table.add_row(
        f"tool definitions ({figures['tools']} tools)",
        f"{figures['tool_definitions_tokens_direct']:,}",
        f"{figures['tool_definitions_tokens_codemode']:,}",
    )
    table.add_row("program written by the model", "-", f"{figures['program_tokens']:,}")
    table.add_row(
        "tool results / final result",
        f"{figures['tool_result_tokens_direct'] or 0:,}",
        f"{figures['final_result_tokens_codemode'] or 0:,}",
    )
    table.add_row("[bold]total[/]", f"[bold]{direct:,}[/]", f"[bold]{mode:,}[/]")
    stdout.print(table)
    if mode:
        stdout.print(
            f"estimate: codemode would use {direct / mode:.0f}x fewer tokens for this task "
            "(measured, both modes run: 'codemode bench tokens').",
            highlight=False,
        )
    command = codemode_command()
    if kept:
        config = shlex.quote(str(kept / "codemode.toml"))
        stdout.print(
            f"\nworkspace kept in {kept}: try '{command} run PROGRAM --config {config}'", highlight=False
        )
    stdout.print("\n" + "\n".join(next_steps(command, checkout())), highlight=False, markup=False)


def _venv_bin() -> Path:
    # Not resolved below bin/: bin/python is a link to the base interpreter.
    return Path(sys.prefix).resolve() / "bin"


def codemode_command() -> str:
    """How to type this codemode: ``codemode`` when that is what PATH finds, else its path
    (``.venv/bin/codemode`` in a clone set up by ``./dev``, the venv not activated)."""
    script = _venv_bin() / "codemode"
    found = shutil.which("codemode")
    if found is not None and (not script.exists() or Path(found).resolve() == script.resolve()):
        return "codemode"
    if script.exists():
        return shlex.quote(_as_typed(script))
    return f"{shlex.quote(sys.executable)} -m codemode.cli"


def checkout() -> Path | None:
    """The source checkout this codemode runs from (an editable install), or None (a wheel)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "dev").is_file() else None


def _as_typed(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (what a person types)."""
    here = Path.cwd()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def next_steps(command: str, clone: Path | None) -> list[str]:
    """What to do after the demo: your own servers, and how to reach codemode from here."""
    lines = [
        "next:",
        f"  your own servers   {command} init --from ~/.config/Claude/claude_desktop_config.json",
        "                     (or 'init' alone: a commented codemode.toml), then sync, pin (review),",
        "                     pin --approve, run PROGRAM.py (README.md, 'Using it')",
    ]
    activate = _venv_bin() / "activate"
    if command != "codemode" and activate.exists():
        lines.append(
            f"  reach codemode     {command} (not on PATH), or run "
            f"'source {shlex.quote(_as_typed(activate))}' once and type codemode"
        )
    if clone is not None:
        python = shlex.quote(_as_typed(_venv_bin() / "python"))
        target = "." if clone == Path.cwd().resolve() else str(clone)
        lines += [
            f"  install elsewhere  pip install {shlex.quote(str(clone))}   (into any Python >= 3.11 venv)",
            f"  add an extra       {python} -m pip install -e {shlex.quote(target + '[otel]')}"
            "   (bench, otel, postgres, ray, semantic)",
        ]
    return lines
