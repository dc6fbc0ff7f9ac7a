"""``codemode batch --plan``: review a job's side effects before its items run.

A sample of the items (the first ``--sample``, or all) is dry-run one by one: reads are sent,
every other call is planned, not sent (see ``CodeMode.plan``). What a reviewer needs of
10,000 items is not 10,000 plans but the calls per tool with the shape of their arguments
(which fields, of which JSON types) and how many sampled items make each; every item's plan is
stored in the ledger too, under its own id.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from codemode.cli._common import print_json, stderr, stdout
from codemode.config import Config

__all__ = ["plan_batch", "print_batch_plan"]


def _shape(value: Any) -> str:
    """A value's JSON type, with the shape of a list's items and an object's fields."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, list):
        items = sorted({_shape(item) for item in value[:20]})  # pyright: ignore[reportUnknownVariableType]
        return f"list[{' | '.join(items) or 'empty'}]"
    if isinstance(value, Mapping):
        if "$planned" in value:
            return "result of a planned call"
        fields = ", ".join(f"{k}: {_shape(v)}" for k, v in sorted(value.items()))  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        return "{" + fields + "}"
    return type(value).__name__


def _arguments_shape(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}: {_shape(value)}" for name, value in sorted(arguments.items())) or "(none)"


async def plan_batch(
    config: Config,
    code: str,
    inputs: Path,
    key_field: str | None,
    sample: int,
    *,
    principal: str | None,
    tenant: str | None,
) -> dict[str, Any]:
    """Dry-run ``code`` on the first ``sample`` items of ``inputs`` (0: all); the summary."""
    from codemode.batch import Item, read_items
    from codemode.engine import CodeMode  # the engine (and the MCP SDK) only when it runs

    items = [item for item in read_items(inputs, key_field) if isinstance(item, Item)]
    chosen = items if sample == 0 else items[:sample]
    calls: Counter[tuple[str, str]] = Counter()
    items_per_call: dict[tuple[str, str], set[str]] = defaultdict(set)
    failed: dict[str, str] = {}
    plans: dict[str, str] = {}
    async with CodeMode(config) as engine:
        for item in chosen:
            plan = await engine.plan(code, inputs=item.data, principal=principal, tenant=tenant)
            plans[item.key] = plan.plan_id
            if plan.result is not None and plan.result.status != "ok" and plan.result.error is not None:
                failed[item.key] = plan.result.error.headline
            for call in plan.calls:
                what = (call.label, _arguments_shape(call.arguments))
                calls[what] += 1
                items_per_call[what].add(item.key)
    return {
        "items": len(items),
        "sampled": len(chosen),
        "calls": [
            {"tool": tool, "arguments": shape, "calls": count, "items": len(items_per_call[(tool, shape)])}
            for (tool, shape), count in sorted(calls.items())
        ],
        "failed": failed,
        "plans": plans,
    }


def print_batch_plan(summary: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(dict(summary))
        return
    if summary["calls"]:
        table = Table(show_edge=False, header_style="bold")
        for column in ("tool", "calls", "items", "arguments"):
            table.add_column(column, overflow="fold")
        for row in summary["calls"]:
            table.add_row(row["tool"], str(row["calls"]), str(row["items"]), row["arguments"])
        stdout.print(table)
    else:
        stdout.print("no call with side effects in the sampled items: nothing was planned", highlight=False)
    stderr.print(
        f"[dim]dry-ran {summary['sampled']} of {summary['items']} items; nothing but reads was sent; "
        "each item's plan is in the ledger (codemode approve --plan PLAN_ID to review one)[/]",
        highlight=False,
    )
    for key, headline in list(summary["failed"].items())[:10]:
        stderr.print(
            f"[yellow]item {escape(key)}: the dry run failed:[/] {escape(headline)}", highlight=False
        )
