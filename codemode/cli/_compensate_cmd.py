"""``codemode ledger compensate RUN``: undo a failed run's completed side effects by hand.

Also how a run's compensation is shown (``codemode run``, ``ledger show``) and the failed
compensations that ``ledger reconcile`` lists: a failed compensation is never retried blindly,
so a person has to see it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from codemode.cli._common import config_option, handle_errors, json_option, load, print_json, stderr, stdout
from codemode.cli._signals import run_until_signalled
from codemode.engine import CompensationReport, compensate_run
from codemode.ledger import CallRecord, Ledger

if TYPE_CHECKING:
    from codemode.broker import Approver

_STYLE = {
    "compensated": "green",
    "would compensate": "cyan",
    "compensation failed": "bold red",
    "compensation in doubt": "magenta",
    "in doubt": "magenta",
    "not compensable": "yellow",
}


def print_compensation(report: CompensationReport | None) -> None:
    """Each side effect of a run and where its undoing stands (on stderr, beside a run's output)."""
    if report is None or not report.effects:
        return
    for effect in report.effects:
        style = _STYLE[effect.status]
        line = f"[{style}]{effect.status}[/] {escape(effect.call_id)} {escape(effect.tool)}"
        if effect.undo_tool is not None:
            line += f" -> {escape(effect.undo_tool)}"
        if effect.detail:
            line += f": {escape(effect.detail)}"
        stderr.print(line, highlight=False)


def failed_compensations(store: Ledger) -> list[CallRecord]:
    """Compensations that failed or were denied and have not succeeded since (a person decides)."""
    failed = [c for state in ("failed", "denied") for c in store.list_calls(state=state, limit=100_000)]
    failed = [c for c in failed if c.compensates is not None]
    undone = {
        c.compensates
        for c in store.compensations_of(c.compensates or "" for c in failed)
        if c.state in ("succeeded", "reconciled_succeeded")
    }
    return [c for c in failed if c.compensates not in undone]


async def _compensate(
    config_path: Path | None, run_id: str, dry_run: bool, approver: Approver | None
) -> CompensationReport:
    from codemode.engine import CodeMode  # the engine (and the MCP SDK) only when it runs

    config = load(config_path)
    # No warm sandboxes: compensations are calls codemode makes itself, not programs.
    config = config.model_copy(update={"sandbox": config.sandbox.model_copy(update={"pool_size": 0})})
    async with CodeMode(config, approver=approver) as engine:
        return await compensate_run(engine, run_id, dry_run=dry_run, approver=approver)


@click.command()
@config_option
@json_option
@click.option("--dry-run", is_flag=True, help="Say what would be undone, and how; send nothing.")
@click.option("--no-input", is_flag=True, help="Never prompt: compensations that need approval are denied.")
@click.argument("run_id", metavar="RUN")
@handle_errors
def compensate(config_path: Path | None, as_json: bool, dry_run: bool, no_input: bool, run_id: str) -> None:
    """Undo the completed side effects of run RUN, newest first, with the calls of [compensation].

    Each compensation is a call through every gate, recorded in the ledger against the call it
    undoes, under an idempotency key derived from it: running this again does nothing more. A
    call whose outcome is unknown is listed to reconcile first, never undone blindly; a failed
    compensation is listed (also by 'codemode ledger reconcile') and not retried.

    \b
    Exit status: 0 when every side effect is undone (or there was none), 1 otherwise.
    """
    from codemode.broker import TerminalApprover, terminal_available

    approver = TerminalApprover() if not no_input and terminal_available() else None
    report = run_until_signalled(_compensate, config_path, run_id, dry_run, approver)
    if as_json:
        print_json(report.to_json())
    else:
        print_compensation(report)
        verb = "would send" if dry_run else "sent"
        stdout.print(
            f"run {escape(run_id)}: {report.outcome} ({verb} {report.sent} compensation(s))", highlight=False
        )
    sys.exit(0 if report.outcome in ("compensated", "nothing to undo") or dry_run else 1)
