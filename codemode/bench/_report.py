"""The outputs of a benchmark run: ``results.json`` (everything), ``report.md`` (for people)
and the terminal table. Failed tasks are reported as failed, never dropped, and cost is always
shown next to success."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from rich.table import Table

from codemode.bench._catalog import SizePoint
from codemode.bench._model import Mode
from codemode.bench._runner import TaskRun

MODES: tuple[Mode, ...] = ("direct", "codemode")
LABEL = {"direct": "direct", "codemode": "code mode"}

# Published figures the issue asks the report to cite next to ours (not measured here).
ANCHORS = (
    "document-to-CRM task: 150,000 -> 2,000 tokens (98.7% less) with code execution over MCP",
    "search + execute over 2,500+ endpoints: about 1,000 tokens, against 1.17M for the full schemas",
    "2,797 tools = 248.1k tokens of schemas",
    "tool search at K=3: 97.1% hit rate, MRR 0.91",
    "programmatic tool calling: +11% accuracy and -24% input tokens on BrowseComp/DeepSearchQA",
    "counter-example: on a 10-tool API direct calling scored 1.00 against 0.97 for code mode, "
    "and search + execute used the most tokens",
)


@dataclass(frozen=True)
class Prices:
    """US dollars per million tokens."""

    input: float = 3.0
    output: float = 15.0

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


def summarize(runs: list[TaskRun], prices: Prices) -> dict[str, dict[str, Any]]:
    """Totals per mode. Cost per successful task = all the mode spent / tasks it solved."""
    out: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        mine = [r for r in runs if r.mode == mode]
        if not mine:
            continue
        passed = sum(r.passed for r in mine)
        inp = sum(r.input_tokens for r in mine)
        outp = sum(r.output_tokens for r in mine)
        cost = prices.cost(inp, outp)
        cpu = [r.sandbox_cpu_s for r in mine if r.sandbox_cpu_s is not None]
        peak = [r.sandbox_peak_mb for r in mine if r.sandbox_peak_mb is not None]
        out[mode] = {
            "runs": len(mine),
            "passed": passed,
            "success_rate": round(passed / len(mine), 3),
            "input_tokens": inp,
            "output_tokens": outp,
            "total_tokens": inp + outp,
            "cost_usd": round(cost, 4),
            "cost_per_success_usd": round(cost / passed, 4) if passed else None,
            "turns": sum(len(r.turns) for r in mine),
            "tool_calls": sum(r.tool_calls for r in mine),
            "mcp_calls": sum(r.mcp_calls for r in mine),
            "wall_s": round(sum(r.wall_s for r in mine), 2),
            "sandbox_cpu_s": round(sum(cpu), 3) if cpu else None,
            "sandbox_peak_mb": max(peak) if peak else None,
        }
    return out


def per_task(runs: list[TaskRun], kinds: dict[str, str], prices: Prices) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in dict.fromkeys(r.task for r in runs):
        row: dict[str, Any] = {"task": name, "kind": kinds.get(name, "")}
        for mode, summary in summarize([r for r in runs if r.task == name], prices).items():
            row[mode] = summary
        rows.append(row)
    return rows


def build_results(
    *,
    runs: list[TaskRun],
    kinds: dict[str, str],
    prices: Prices,
    meta: dict[str, Any],
    catalog: list[SizePoint],
    catalog_source: str,
) -> dict[str, Any]:
    return {
        "version": 1,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        **meta,
        "prices_usd_per_million": asdict(prices),
        "summary": summarize(runs, prices),
        "tasks": per_task(runs, kinds, prices),
        "runs": [r.to_json() for r in runs],
        "catalog": {"source": catalog_source, "points": [asdict(p) for p in catalog]},
        "anchors": list(ANCHORS),
    }


_Cell = Callable[[dict[str, Any]], str]


def _n(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3g}" if value < 1 else f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _ratio(direct: int, codemode: int) -> str:
    if not direct:
        return "n/a"
    change = 1 - codemode / direct
    return f"{change:.1%} less" if change >= 0 else f"{-change:.1%} MORE"


def _failed(summary: dict[str, Any]) -> bool:
    return summary["passed"] < summary["runs"]


def _both_solved(row: dict[str, Any]) -> bool:
    return all(mode in row and not _failed(row[mode]) for mode in MODES)


def _saving(d: dict[str, Any] | None, c: dict[str, Any] | None) -> str:
    """Code mode against direct for one task: only when both modes solved it every time. A failed
    run's tokens say nothing about the task (one that died at once spent nothing: "100% less")."""
    if d is None or c is None:
        return "n/a"
    failed = [LABEL[mode] for mode, s in (("direct", d), ("codemode", c)) if _failed(s)]
    if failed:
        return f"n/a ({' and '.join(failed)} failed)"
    return _ratio(d["total_tokens"], c["total_tokens"])


def _suite_saving(results: dict[str, Any]) -> str:
    """Code mode against direct over the tasks both modes solved every time, saying how many
    those are when it is not all of them."""
    rows = results["tasks"]
    both = [r for r in rows if _both_solved(r)]
    if not both:
        return "n/a (no task solved by both)"
    saving = _ratio(
        sum(r["direct"]["total_tokens"] for r in both), sum(r["codemode"]["total_tokens"] for r in both)
    )
    return saving if len(both) == len(rows) else f"{saving} on the {len(both)} of {len(rows)} both solved"


def task_rows(results: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in results["tasks"]:
        d, c = row.get("direct"), row.get("codemode")
        cells = [row["task"]]
        for s in (d, c):
            cells.append("n/a" if s is None else f"{s['total_tokens']:,} ({s['passed']}/{s['runs']} ok)")
        cells.append(_saving(d, c))
        rows.append(cells)
    return rows


def terminal_table(results: dict[str, Any]) -> Table:
    table = Table(title=f"codemode bench tokens ({results['tokenizer']}, {results['backend']} sandbox)")
    for column in ("task", "direct tokens", "code mode tokens", "code mode vs direct"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for cells in task_rows(results):
        table.add_row(*cells)
    summary = results["summary"]
    if "direct" in summary and "codemode" in summary:
        d, c = summary["direct"], summary["codemode"]
        table.add_section()
        table.add_row(
            "all tasks",
            f"{d['total_tokens']:,} ({d['passed']}/{d['runs']} ok)",
            f"{c['total_tokens']:,} ({c['passed']}/{c['runs']} ok)",
            _suite_saving(results),
        )
        table.add_row(
            "$ per successful task", _n(d["cost_per_success_usd"]), _n(c["cost_per_success_usd"]), ""
        )
    return table


def markdown(results: dict[str, Any]) -> str:
    prices = results["prices_usd_per_million"]
    lines = [
        "# codemode bench tokens",
        "",
        f"- date: {results['date']}",
        f"- command: `{results['command']}`",
        f"- agents: {results['agents']}; tokenizer: {results['tokenizer']}; "
        f"sandbox backend: {results['backend']}",
        f"- servers: {', '.join(f'{k} ({v} tools)' for k, v in results['servers'].items())}",
        f"- tool definitions per request: direct {results['definition_tokens']['direct']:,} tokens, "
        f"code mode {results['definition_tokens']['codemode']:,} tokens",
        f"- prices: ${prices['input']}/M input, ${prices['output']}/M output tokens",
        "",
        "Every request is counted as an API bills it: system text + every tool definition + the whole "
        "conversation, re-sent each turn. Both modes really ran: direct mode's calls and code mode's "
        "programs went through codemode's broker and are counted in its ledger (MCP calls).",
        "",
        "## Per task",
        "",
        "| task | what it exercises | direct tokens | code mode tokens | code mode vs direct |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    kinds = {row["task"]: row["kind"] for row in results["tasks"]}
    for cells in task_rows(results):
        lines.append(f"| {cells[0]} | {kinds.get(cells[0], '')} | {cells[1]} | {cells[2]} | {cells[3]} |")
    lines += ["", "## Per mode", "", "| | " + " | ".join(LABEL[m] for m in results["summary"]) + " |"]
    lines.append("| --- |" + " ---: |" * len(results["summary"]))
    fields: tuple[tuple[str, _Cell], ...] = (
        ("success", lambda s: f"{s['passed']}/{s['runs']}"),
        ("input tokens", lambda s: _n(s["input_tokens"])),
        ("output tokens", lambda s: _n(s["output_tokens"])),
        ("cost (USD)", lambda s: _n(s["cost_usd"])),
        ("cost per successful task (USD)", lambda s: _n(s["cost_per_success_usd"])),
        ("model turns", lambda s: _n(s["turns"])),
        ("model tool calls", lambda s: _n(s["tool_calls"])),
        ("MCP calls (ledger)", lambda s: _n(s["mcp_calls"])),
        ("wall time (s)", lambda s: _n(s["wall_s"])),
        ("sandbox CPU (s)", lambda s: _n(s["sandbox_cpu_s"])),
        ("sandbox peak memory (MB)", lambda s: _n(s["sandbox_peak_mb"])),
    )
    for label, get in fields:
        lines.append(f"| {label} | " + " | ".join(get(s) for s in results["summary"].values()) + " |")
    failed = [r for r in results["runs"] if not r["passed"]]
    lines += ["", "## Failures", ""]
    lines += [
        f"- {r['task']} [{r['mode']}]: {r['error']}; answer: `{r['answer'][:300]}`" for r in failed
    ] or ["None: both modes solved every task."]
    worse = [c for c in task_rows(results) if c[3].endswith("MORE")]
    lines += ["", "## Where direct calling wins", ""]
    lines += [f"- {c[0]}: code mode used {c[3]} tokens than direct." for c in worse]
    if not worse:
        closest = min(
            (r for r in results["tasks"] if _both_solved(r)),
            key=lambda r: r["direct"]["total_tokens"] - r["codemode"]["total_tokens"],
            default=None,
        )
        lines.append("No task in this run used more tokens in code mode.")
        if closest is not None:
            d, c = closest["direct"], closest["codemode"]
            lines.append(
                f"The closest is {closest['task']}: {d['total_tokens']:,} tokens in {d['turns']} requests "
                f"direct, {c['total_tokens']:,} in {c['turns']} requests in code mode (wall time "
                f"{d['wall_s']} s against {c['wall_s']} s)."
            )
    points = results["catalog"]["points"]
    if points:
        lines += [
            "",
            f"## Catalog scale ({results['catalog']['source']})",
            "",
            "The measured conversations re-priced with the catalog grown to N tools (direct: all N "
            "definitions in every request; code mode: run_code's server index grows). Discovery: "
            "codemode's tool search at that size. The scripted conversations are the same at every "
            "size (the agents know which tools to use), so code mode's search results are not "
            "re-priced; Recall@k and MRR show how often a real model's search would find them.",
            "",
            "| tools | direct defs/request | code mode defs/request | suite direct | suite code mode "
            "| queries "
            "| Recall@1 | Recall@3 | Recall@5 | MRR |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for p in points:
            q = p["quality"]
            lines.append(
                f"| {p['tools']:,} | {p['direct_definition_tokens']:,} | {p['codemode_definition_tokens']:,} "
                f"| {p['direct_tokens']:,} | {p['codemode_tokens']:,} | {p['queries']} | {q['recall@1']:.3f} "
                f"| {q['recall@3']:.3f} | {q['recall@5']:.3f} | {q['mrr']:.3f} |"
            )
    lines += ["", "## Published figures to compare with (not measured here)", ""]
    lines += [f"- {a}" for a in results["anchors"]]
    charts: list[str] = results.get("charts") or []
    if charts:
        lines += ["", "## Charts", ""] + [f"![{c}]({c})" for c in charts]
    return "\n".join(lines) + "\n"
