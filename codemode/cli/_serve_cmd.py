"""``codemode serve``: codemode as an MCP server (stdio or Streamable HTTP)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import click

from codemode.cli._common import EXIT_USAGE, config_option, fail, handle_errors, load
from codemode.cli._signals import run_draining, run_until_signalled


@click.command()
@config_option
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio for a host that launches codemode; http for Streamable HTTP.",
)
@click.option("--host", default=None, help="HTTP bind address [default: [serve] host, 127.0.0.1].")
@click.option(
    "--port", type=int, default=None, help="HTTP port [default: [serve] port, 8765; 0 = any free port]."
)
@click.option(
    "--metrics",
    is_flag=True,
    help="With --transport http: also answer GET /metrics in Prometheus text format (needs the otel extra).",
)
@click.option(
    "--console",
    is_flag=True,
    help="With --transport http: also serve the operator console at /console (runs, evidence, "
    'approvals, servers, ledger verify) to tokens with roles = ["operator"].',
)
@click.option("-v", "--verbose", is_flag=True, help="Log to stderr (MCP session ids are masked).")
@handle_errors
def serve(
    config_path: Path | None,
    transport: Literal["stdio", "http"],
    host: str | None,
    port: int | None,
    metrics: bool,
    console: bool,
    verbose: bool,
) -> None:
    """Serve the run_code tool (plus search_tools, list_files, read_file) over MCP.

    \b
    stdio:  in an MCP host's config:
            {"command": "codemode", "args": ["serve", "--config", "/path/to/codemode.toml"]}
    http:   codemode serve --transport http   → http://127.0.0.1:8765/mcp

    Over HTTP, Host and Origin are checked against DNS rebinding, and bearer tokens from
    [serve.tokens] map callers to principals (required when binding beyond 127.0.0.1). Each MCP
    session belongs to the principal and tenant whose token opened it (recorded in the ledger);
    any other token gets 404 for it. Calls that need approval are asked through the client
    (elicitation, or input-required on 2026-07-28), and the ledger records who answered.

    With --console, operators (tokens with roles = ["operator"]) open http://127.0.0.1:8765/console
    in a browser: runs and their evidence, approvals waiting (approve or deny), servers and pin
    drift, and 'ledger verify'. Approval requests then wait for an operator there too.
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    if metrics and transport != "http":
        fail("--metrics needs --transport http (an HTTP endpoint to answer on)", code=EXIT_USAGE)
    if console and transport != "http":
        fail("--console needs --transport http (a browser opens it over HTTP)", code=EXIT_USAGE)
    config = load(config_path)
    from codemode.serve import serve_http, serve_stdio

    if transport == "stdio":
        run_until_signalled(serve_stdio, config)
    else:
        run_draining(
            lambda stop: serve_http(config, host=host, port=port, metrics=metrics, console=console, stop=stop)
        )
