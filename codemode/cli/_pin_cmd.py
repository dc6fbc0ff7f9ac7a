"""``codemode pin``: review and approve tool pins in codemode.lock (local state only: no server
is started, so the review is fast and works offline)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from codemode.catalog import ToolStatus, load_lock, locked, parse_selector, revoke, save_lock
from codemode.cli._common import (
    EXIT_USAGE,
    config_option,
    fail,
    handle_errors,
    json_option,
    load,
    print_json,
    stdout,
)
from codemode.cli._pin_hints import approve_and_accept, at_a_terminal
from codemode.cli._pin_review import plain, review_row, review_table
from codemode.config import RISK_ORDER, Config
from codemode.stubs import escape_invisible


def _pin_rows(config: Config) -> list[dict[str, Any]]:
    lock = load_lock(config.lock_path)
    rows: list[dict[str, Any]] = []
    for server, tools in sorted(lock.servers.items()):
        for name, entry in sorted(tools.items()):
            if entry.removed:
                status = ToolStatus.REMOVED
            elif entry.observed is not None:
                status = ToolStatus.CHANGED if entry.approved else ToolStatus.NEW
            else:
                status = ToolStatus.APPROVED
            rows.append(
                {
                    **review_row(config, server, name, status.value, entry),
                    "approved_hash": entry.approved.hash if entry.approved else None,
                    "observed_hash": entry.observed.hash if entry.observed else None,
                }
            )
    return rows


def _definition_diff(config: Config, selector: str) -> str:
    server, tool = parse_selector(selector)
    if server is None or tool is None:
        fail("--diff needs SERVER/TOOL")
    entry = load_lock(config.lock_path).entry(server, tool)
    if entry is None:
        fail(f"no tool {selector} in {config.lock_path}")
    old = entry.approved.definition if entry.approved else {}
    new = entry.observed.definition if entry.observed else old

    def lines(definition: dict[str, Any]) -> list[str]:
        # Invisible characters (tags, zero-width, bidi controls) are written as \uXXXX escapes:
        # two lines that differ must look different to the person reviewing the change. Escapes
        # are JSON, so each line still reads as the definition's JSON.
        text = json.dumps(definition, indent=2, sort_keys=True, ensure_ascii=False)
        return escape_invisible(text).splitlines()

    return "\n".join(difflib.unified_diff(lines(old), lines(new), "approved", "observed", lineterm=""))


@click.command()
@config_option
@json_option
@click.option(
    "--approve",
    "approve_flag",
    is_flag=True,
    help="Approve what is pending for SELECTORS (default: everything).",
)
@click.option(
    "--accept-hints",
    "accept_flag",
    is_flag=True,
    help="Rate the tools SELECTORS name by their own hints (readOnlyHint ...) although their server "
    "is not trusted. With --approve: approve them first; alone: tools already approved.",
)
@click.option("--revoke", "revoke_tool", metavar="SERVER/TOOL", help="Withdraw the approval of one tool.")
@click.option(
    "--diff", "diff_tool", metavar="SERVER/TOOL", help="Show how a tool changed since its approval."
)
@click.option("--all", "show_all", is_flag=True, help="List every pin, approved ones too.")
@click.option("--no-input", is_flag=True, help="Never ask at the terminal whether to accept tools' hints.")
@click.argument("selectors", nargs=-1, metavar="[SERVER[/TOOL]]...")
@handle_errors
def pin(
    config_path: Path | None,
    as_json: bool,
    approve_flag: bool,
    accept_flag: bool,
    revoke_tool: str | None,
    diff_tool: str | None,
    show_all: bool,
    no_input: bool,
    selectors: tuple[str, ...],
) -> None:
    """Review and approve tool pins in codemode.lock.

    \b
    codemode pin                          new and changed tools: risk, annotations, what changed
    codemode pin --all                    every pin and its status
    codemode pin --diff crm/get_customer  show what changed since approval
    codemode pin --approve                approve everything pending
    codemode pin --approve crm            approve one server's pending tools (also crm/*)
    codemode pin --approve crm/add_note   approve one tool
    codemode pin --approve --accept-hints time/*
                                          approve, and rate the tools by their own hints
    codemode pin --accept-hints time/get_current_time
                                          the same for a tool approved already
    codemode pin --revoke crm/add_note    make a tool unusable until approved again

    A tool's annotations (readOnlyHint, destructiveHint ...) are its server's claims: unless the
    server is 'trusted = true', they never lower its risk, so each call of it needs approval.
    Accepting them is saying you read the tool and believe its claim: it is then rated by them
    (read-only: low risk) until its definition changes. It never rates a tool lower than its
    hints claim: a destructive tool, or one without hints, stays high. At a terminal, --approve
    asks about the tools whose hints would lower their risk (--no-input: never).

    Works on the lock file only: run 'codemode sync' first to record what servers list now.
    """
    given = (("--diff", diff_tool), ("--revoke", revoke_tool), ("--approve", approve_flag))
    actions = [name for name, value in (*given, ("--accept-hints", accept_flag)) if value]
    if len(actions) > 1 and actions != ["--approve", "--accept-hints"]:
        fail(
            f"{' and '.join(actions)} do different things: give one at a time",
            hint="codemode pin --approve --accept-hints SERVER[/TOOL] is the one pair that goes together",
            code=EXIT_USAGE,
        )
    config = load(config_path)
    if diff_tool:
        click.echo(_definition_diff(config, diff_tool) or "no difference")
        return
    if revoke_tool:
        server, tool = parse_selector(revoke_tool)
        if server is None or tool is None:
            fail("--revoke needs SERVER/TOOL")
        with locked(config.lock_path):
            save_lock(config.lock_path, revoke(load_lock(config.lock_path), server, tool))
        stdout.print(f"revoked {server}/{tool}", highlight=False, markup=False)
        return
    if approve_flag or accept_flag:
        ask = not no_input and at_a_terminal()
        approve_and_accept(
            config, selectors, approve=approve_flag, accept=accept_flag, as_json=as_json, ask=ask
        )
        return
    if selectors:
        fail(
            "SERVER[/TOOL] selectors go with --approve or --accept-hints",
            hint="codemode pin --approve crm/add_note",
        )
    rows = _pin_rows(config)
    if as_json:
        print_json({"lock_file": str(config.lock_path), "pins": rows})
        return
    if not rows:
        stdout.print(f"no pins in {config.lock_path}; run 'codemode sync' first", highlight=False)
        return
    pending = [row for row in rows if row["status"] != "approved"]
    if pending:
        stdout.print(review_table(pending))
        stdout.print(
            "approve with 'codemode pin --approve [SERVER[/TOOL]]'; see a change with "
            "'codemode pin --diff SERVER/TOOL'",
            highlight=False,
            markup=False,
        )
        if any(_hints_would_lower(row) for row in pending):
            stdout.print(
                "annotations are the server's own claims, and count only once accepted: "
                "'codemode pin --approve --accept-hints SERVER[/TOOL]' approves and accepts them",
                highlight=False,
                markup=False,
            )
    approved = len(rows) - len(pending)
    if show_all:
        table = Table(show_edge=False, header_style="bold")
        for column in ("server", "tool", "status", "risk", "hints", "hash"):
            table.add_column(column, overflow="fold")
        styles = {"approved": "green", "new": "cyan", "changed": "yellow", "removed": "red"}
        for row in rows:
            digest = row["observed_hash"] or row["approved_hash"] or ""
            status = f"[{styles[row['status']]}]{row['status']}[/]"
            table.add_row(
                plain(row["server"]), plain(row["tool"]), status, plain(row["risk"]), _hints(row), digest[:19]
            )
        stdout.print(table)
    elif approved:
        stdout.print(
            f"{approved} approved tool(s) unchanged ('codemode pin --all' lists them)", highlight=False
        )
    claims = [row for row in rows if row["status"] == "approved" and _hints_would_lower(row)]
    if claims:
        stdout.print(
            f"{len(claims)} approved tool(s) claim hints that would lower their risk; accept them "
            "after reading them with 'codemode pin --accept-hints SERVER[/TOOL]'",
            highlight=False,
            markup=False,
        )


def _hints_would_lower(row: dict[str, Any]) -> bool:
    return not row["trusted"] and RISK_ORDER[row["hints_risk"]] < RISK_ORDER[row["risk"]]


def _hints(row: dict[str, Any]) -> str:
    """The ``--all`` table's word on a tool's hints: accepted, trusted, or a claim not yet believed."""
    if row["hints_accepted"]:
        return f"accepted ({row['hints_risk']})"
    if row["trusted"]:
        return "server trusted"
    return f"claim {row['hints_risk']}" if _hints_would_lower(row) else "-"
