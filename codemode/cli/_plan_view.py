"""A dry run's plan for a person (a table) or a program (``--json``): ``codemode run --plan``.

Everything shown came from the program or a server: arguments are escaped for the terminal
(``summarize_arguments`` hides secrets and invisible characters) and printed without markup.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from codemode.broker import PlannedCall, summarize_arguments
from codemode.cli._common import stderr, stdout
from codemode.engine import Plan


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan and its dry run's result, for ``--json``."""
    return {"plan": plan.as_json(), "run": None if plan.result is None else plan.result.to_json()}


def _approval(call: PlannedCall) -> str:
    """Whether a real run would ask for approval (the reason is in ``--json``'s decisions)."""
    return "needed" if any(line.startswith("consent: needs approval") for line in call.decisions) else "-"


def print_plan(plan: Plan, *, next_step: bool = True) -> None:
    """The planned calls as a table on stdout; what the plan is bound to, on stderr (and, with
    ``next_step``, how to approve it)."""
    out = stdout
    if plan.calls:
        table = Table(show_edge=False, header_style="bold")
        for column in ("#", "tool", "risk", "nth", "approval", "arguments"):
            table.add_column(column, overflow="fold")
        for call in plan.calls:
            table.add_row(
                str(call.index),
                escape(call.label),
                call.risk,
                str(call.occurrence + 1),
                _approval(call),
                escape(summarize_arguments(dict(call.arguments), limit=200)),
            )
        out.print(table)
    else:
        out.print("no call with side effects: nothing was planned", highlight=False)
    reads = ", ".join(sorted({f"{read.server}/{read.tool}" for read in plan.reads}))
    which = f" ({escape(reads)})" if reads else ""
    stderr.print(f"[dim]reads made: {len(plan.reads)}{which}[/]", highlight=False)
    if plan.result is not None and plan.result.status != "ok" and plan.result.error is not None:
        stderr.print(
            f"[yellow]the dry run failed:[/] {escape(plan.result.error.headline)} "
            "(the plan holds the calls made before it failed)",
            highlight=False,
        )
    stderr.print(
        f"[dim]plan {plan.plan_id} · {len(plan.calls)} planned calls · code sha256:{plan.code_digest[:12]} · "
        f"for {escape(plan.principal)}@{escape(plan.tenant)} · "
        f"expires {plan.expires_at:%Y-%m-%d %H:%M:%S} UTC[/]",
        highlight=False,
    )
    if next_step and plan.calls:
        stderr.print(
            f"review and approve it: codemode approve --plan {plan.plan_id}; then run it: "
            f"codemode run --with-plan {plan.plan_id} FILE",
            markup=False,
            highlight=False,
        )
