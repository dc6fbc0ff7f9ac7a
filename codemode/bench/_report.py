"""The outputs of a benchmark run: ``results.json`` (everything), ``report.md`` (for people)
and the terminal table. Failed tasks are reported as failed, never dropped, and cost is always
shown next to success."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.table import Table

from codemode.bench._catalog import SizePoint
from codemode.bench._model import Mode
from codemode.bench._skillreport import figure_label, skill_comparisons, skill_lines
from codemode.bench._taskrun import TaskRun, rate

MODES: tuple[Mode, ...] = ("direct", "codemode", "skills")
COMPARED: tuple[Mode, ...] = ("direct", "codemode")
"""The modes every task runs in; ``skills`` runs only for a skills task (see ``_skillreport``)."""
LABEL = {"direct": "direct", "codemode": "code mode", "skills": "code mode + skills"}

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


def _total(values: Sequence[float | None], digits: int) -> float | None:
    """A sum that is unknown when any part is: leaving a part out would read as a measurement."""
    known = [v for v in values if v is not None]
    return round(sum(known), digits) if len(known) == len(values) else None


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
        peaks = [r.sandbox_peak_mb for r in mine]
        attempted = sum(r.mcp_calls for r in mine)
        denied = sum(r.calls_denied for r in mine)
        checked = sum(r.arguments_checked for r in mine)
        scored = [r.refrained for r in mine if r.refrained is not None]
        needed = sum(r.compensation_needed for r in mine)
        compensated = sum(r.compensated for r in mine)
        out[mode] = {
            "runs": len(mine),
            "passed": passed,
            "success_rate": round(passed / len(mine), 3),
            "compensation_needed": needed,
            "compensated": compensated,
            "compensation_rate": rate(compensated, needed),
            "input_tokens": inp,
            "output_tokens": outp,
            "total_tokens": inp + outp,
            "cost_usd": round(cost, 4),
            "cost_per_success_usd": round(cost / passed, 4) if passed else None,
            "turns": sum(len(r.turns) for r in mine),
            "tool_calls": sum(r.tool_calls for r in mine),
            "mcp_calls": attempted,
            "calls_denied": denied,
            "denied": dict(sum((Counter(r.denied) for r in mine), Counter[str]())),
            "valid_call_rate": rate(attempted - denied, attempted),
            "schema_pass_rate": rate(checked - sum(r.arguments_denied for r in mine), checked),
            "refrain_scored": len(scored),
            "refrained": sum(scored),
            "wall_s": round(sum(r.wall_s for r in mine), 3),
            "model_s": round(sum(r.model_s for r in mine), 3),
            "discovery_s": round(sum(r.discovery_s for r in mine), 3),
            "execution_s": round(sum(r.execution_s for r in mine), 3),
            "sandbox_cpu_s": _total([r.sandbox_cpu_s for r in mine], 3),
            "sandbox_peak_mb": max(p for p in peaks if p is not None) if None not in peaks else None,
            "channel_in_bytes": _total([r.channel_in_bytes for r in mine], 0),
            "channel_out_bytes": _total([r.channel_out_bytes for r in mine], 0),
            "broker_cpu_s": _total([r.broker_cpu_s for r in mine], 3),
            "caps_hit": dict(Counter(cap for r in mine for cap in r.caps_hit)),
        }
    return out


def cost_per_success(
    summary: dict[str, dict[str, Any]], points: list[SizePoint], prices: Prices
) -> list[dict[str, Any]]:
    """Each catalog size's suite cost per solved task, per mode. Growing the catalog adds input
    tokens only (every request carries more definitions); what the model wrote is the same."""
    rows: list[dict[str, Any]] = []
    for point in points:
        row: dict[str, Any] = {"tools": point.tools}
        for mode, tokens in (("direct", point.direct_tokens), ("codemode", point.codemode_tokens)):
            s = summary.get(mode)
            if s is None:
                continue
            cost = prices.cost(tokens - s["output_tokens"], s["output_tokens"])
            row[mode] = round(cost / s["passed"], 4) if s["passed"] else None
        rows.append(row)
    return rows


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
    skills: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Everything results.json holds. ``skills``: each skills task's skill, by task."""
    summary = summarize(runs, prices)
    label = figure_label(str(meta.get("agents", "scripted")), "replay" in meta)
    return {
        "version": 2,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        **meta,
        "prices_usd_per_million": asdict(prices),
        "summary": summary,
        "tasks": per_task(runs, kinds, prices),
        "skills": skill_comparisons(runs, skills or {}, label),
        "runs": [r.to_json() for r in runs],
        "catalog": {
            "source": catalog_source,
            "points": [asdict(p) for p in catalog],
            "cost_per_success_usd": cost_per_success(summary, catalog, prices),
        },
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
    return all(mode in row and not _failed(row[mode]) for mode in COMPARED)


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
        rows: tuple[tuple[str, _Cell], ...] = (
            ("success / compensation success", lambda s: f"{_pct(s['success_rate'])} / {compensation(s)}"),
            ("sandbox CPU s / peak MB", lambda s: f"{_n(s['sandbox_cpu_s'])} / {_n(s['sandbox_peak_mb'])}"),
            (
                "valid calls / schema pass",
                lambda s: f"{_pct(s['valid_call_rate'])} / {_pct(s['schema_pass_rate'])}",
            ),
            ("refrained", _refrained),
        )
        for label, cell in rows:
            table.add_row(label, cell(d), cell(c), "")
    return table


def _pct(value: float | None) -> str:
    return "n/a (no call)" if value is None else f"{value:.1%}"


def compensation(s: dict[str, Any]) -> str:
    """The compensation success rate: runs whose side effects were all undone, of the runs that
    failed after side effects; n/a when no run needed it."""
    if not s["compensation_needed"]:
        return "n/a (none needed)"
    return f"{s['compensation_rate']:.1%} ({s['compensated']}/{s['compensation_needed']})"


def _kb(inward: int | None, outward: int | None) -> str:
    if inward is None or outward is None:
        return "n/a"
    return f"{inward / 1024:,.1f} / {outward / 1024:,.1f}"


def _denied(s: dict[str, Any]) -> str:
    """The count, and which gate denied which tool how often."""
    detail = ", ".join(f"{kind} x{count}" for kind, count in s["denied"].items())
    return f"{s['calls_denied']} ({detail})" if detail else str(s["calls_denied"])


def _refrained(s: dict[str, Any]) -> str:
    return f"{s['refrained']}/{s['refrain_scored']}" if s["refrain_scored"] else "n/a (no such task)"


def _cost_lines(results: dict[str, Any]) -> list[str]:
    """Per task and mode: where the time went, what running it cost the machine, and what the
    broker's gates made of its calls."""
    lines = [
        "",
        "## Per task and mode: time, resources and calls",
        "",
        "Wall time split into waiting for the model, discovery (search_tools, list_files, "
        "read_file) and execution (run_code, or the direct calls); the rest is the benchmark's "
        "own bookkeeping (counting the tokens of each request). Sandbox CPU and peak memory "
        "are what each run's sandbox accounted for itself; the channel is its only network. "
        "Valid calls: MCP calls every gate let through / calls attempted; schema pass: calls "
        "whose arguments matched the pinned schema / calls the arguments gate checked (from the "
        "ledger's gate decisions). Refrained: for a task that needs no call (or one), whether the "
        "mode kept to it.",
        "",
        "| task | mode | wall s (model / discovery / execution) | sandbox CPU s | sandbox peak MB "
        "| channel KB in / out | broker CPU s | MCP calls | valid calls | schema pass | denied | refrained |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in results["tasks"]:
        for mode in MODES:
            s = row.get(mode)
            if s is None:
                continue
            wall = f"{_n(s['wall_s'])} ({_n(s['model_s'])} / {_n(s['discovery_s'])} / {_n(s['execution_s'])})"
            lines.append(
                f"| {row['task']} | {LABEL[mode]} | {wall} | {_n(s['sandbox_cpu_s'])} "
                f"| {_n(s['sandbox_peak_mb'])} | {_kb(s['channel_in_bytes'], s['channel_out_bytes'])} "
                f"| {_n(s['broker_cpu_s'])} "
                f"| {_n(s['mcp_calls'])} | {_pct(s['valid_call_rate'])} | {_pct(s['schema_pass_rate'])} "
                f"| {_denied(s)} | {_refrained(s) if s['refrain_scored'] else ''} |"
            )
    return lines


def _provenance(results: dict[str, Any]) -> list[str]:
    """Where the run's figures come from, when a real model was involved."""
    replay: dict[str, Any] | None = results.get("replay")
    if replay is not None:
        note = f"; {replay['note']}" if replay["note"] else ""
        return [
            f"- a replay of `{replay['file']}`, recorded {replay['recorded']} with `{replay['command']}` "
            f"(codemode {replay['codemode']}{note}): tokens, answers and checks computed again from "
            "the recorded requests and replies; MCP calls, gate decisions, times and resource use as "
            "recorded"
        ]
    if results.get("replay_file"):
        return [
            f"- every request and reply: `{results['replay_file']}` (`codemode bench tokens --replay "
            f"{results['replay_file']}` re-scores this run offline, without an API key)"
        ]
    return []


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
        *_provenance(results),
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
    skipped: dict[str, str] = results.get("skipped") or {}
    if skipped:
        lines += ["", *(f"- {task}: not run: {why}" for task, why in skipped.items())]
    lines += skill_lines(results)
    lines += ["", "## Per mode", "", "| | " + " | ".join(LABEL[m] for m in results["summary"]) + " |"]
    lines.append("| --- |" + " ---: |" * len(results["summary"]))
    fields: tuple[tuple[str, _Cell], ...] = (
        ("success", lambda s: f"{s['passed']}/{s['runs']}"),
        ("compensation success (failed runs with side effects undone)", compensation),
        ("input tokens", lambda s: _n(s["input_tokens"])),
        ("output tokens", lambda s: _n(s["output_tokens"])),
        ("cost (USD)", lambda s: _n(s["cost_usd"])),
        ("cost per successful task (USD)", lambda s: _n(s["cost_per_success_usd"])),
        ("model turns", lambda s: _n(s["turns"])),
        ("model tool calls", lambda s: _n(s["tool_calls"])),
        ("MCP calls (ledger)", lambda s: _n(s["mcp_calls"])),
        ("denied calls", lambda s: _denied(s)),
        ("valid tool-call rate", lambda s: _pct(s["valid_call_rate"])),
        ("argument-schema pass rate", lambda s: _pct(s["schema_pass_rate"])),
        ("refrained (tasks that need no or one call)", _refrained),
        ("wall time (s)", lambda s: _n(s["wall_s"])),
        ("… waiting for the model (s)", lambda s: _n(s["model_s"])),
        ("… discovery: search_tools, list_files, read_file (s)", lambda s: _n(s["discovery_s"])),
        ("… execution: run_code or direct calls (s)", lambda s: _n(s["execution_s"])),
        ("sandbox CPU (s)", lambda s: _n(s["sandbox_cpu_s"])),
        ("sandbox peak memory (MB)", lambda s: _n(s["sandbox_peak_mb"])),
        ("sandbox channel in / out (KB)", lambda s: _kb(s["channel_in_bytes"], s["channel_out_bytes"])),
        ("broker CPU (s)", lambda s: _n(s["broker_cpu_s"])),
        ("resource caps hit", lambda s: ", ".join(f"{k} x{v}" for k, v in s["caps_hit"].items()) or "none"),
    )
    for label, get in fields:
        lines.append(f"| {label} | " + " | ".join(get(s) for s in results["summary"].values()) + " |")
    lines += _cost_lines(results)
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
            "| $ per solved task direct | $ per solved task code mode | queries "
            "| Recall@1 | Recall@3 | Recall@5 | MRR |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        costs: list[dict[str, Any]] = results["catalog"].get("cost_per_success_usd") or [{}] * len(points)
        for p, cost in zip(points, costs, strict=True):
            q = p["quality"]
            lines.append(
                f"| {p['tools']:,} | {p['direct_definition_tokens']:,} | {p['codemode_definition_tokens']:,} "
                f"| {p['direct_tokens']:,} | {p['codemode_tokens']:,} | {_n(cost.get('direct'))} "
                f"| {_n(cost.get('codemode'))} | {p['queries']} | {q['recall@1']:.3f} "
                f"| {q['recall@3']:.3f} | {q['recall@5']:.3f} | {q['mrr']:.3f} |"
            )
    lines += ["", "## Published figures to compare with (not measured here)", ""]
    lines += [f"- {a}" for a in results["anchors"]]
    charts: list[str] = results.get("charts") or []
    if charts:
        lines += ["", "## Charts", ""] + [f"![{c}]({c})" for c in charts]
    return "\n".join(lines) + "\n"
