"""PNG charts of a benchmark run. The only module that imports matplotlib (the ``bench`` extra):
without it the run still writes everything else and says which charts are missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TASK_CHART = "tokens_per_task.png"
CATALOG_CHART = "tokens_vs_catalog.png"
COST_CHART = "cost_vs_catalog.png"
COLORS = {"direct": "#c44e52", "codemode": "#4c72b0"}
LABELS = {"direct": "direct tool calling", "codemode": "code mode"}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError:
        return False
    return True


def write_charts(results: dict[str, Any], out: Path) -> list[str]:
    """Write the charts into ``out``; returns their file names (empty without matplotlib)."""
    if not available():
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []
    rows = [r for r in results["tasks"] if "direct" in r and "codemode" in r]
    if rows:
        fig, ax = plt.subplots(figsize=(8, 3.6), dpi=90)
        xs = range(len(rows))
        width = 0.4
        direct = [r["direct"]["total_tokens"] for r in rows]
        code = [r["codemode"]["total_tokens"] for r in rows]
        direct_bars = ax.bar(
            [x - width / 2 for x in xs], direct, width, label="direct tool calling", color="#c44e52"
        )
        code_bars = ax.bar([x + width / 2 for x in xs], code, width, label="code mode", color="#4c72b0")
        ax.set_yscale("log")
        # A failed run's tokens are not the task's cost: its bar is hatched and labelled, so that
        # no one reads a saving off it (the tables say n/a). A run that spent nothing has no bar
        # on a log scale: its label sits on the axis.
        bottom = ax.get_ylim()[0]
        for mode, bars in (("direct", direct_bars), ("codemode", code_bars)):
            for bar, row in zip(bars.patches, rows, strict=True):
                if row[mode]["passed"] < row[mode]["runs"]:
                    bar.set_hatch("//")
                    bar.set_alpha(0.5)
                    where = (bar.get_x() + bar.get_width() / 2, max(bar.get_height(), bottom))
                    ax.annotate("failed", where, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(xs), [r["task"] for r in rows], rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("tokens per task (input + output)")
        ax.set_title("Tokens per task, both modes executed", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / TASK_CHART)
        plt.close(fig)
        written.append(TASK_CHART)
    points = results["catalog"]["points"]
    if len(points) > 1:
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=90)
        tools = [p["tools"] for p in points]
        ax.plot(
            tools, [p["direct_tokens"] for p in points], "o-", label="direct tool calling", color="#c44e52"
        )
        ax.plot(tools, [p["codemode_tokens"] for p in points], "o-", label="code mode", color="#4c72b0")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tools in the catalog")
        ax.set_ylabel("suite tokens (all tasks)")
        ax.set_title(f"Tokens against catalog size ({results['catalog']['source']})", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / CATALOG_CHART)
        plt.close(fig)
        written.append(CATALOG_CHART)
        _cost_chart(results, out)
        written.append(COST_CHART)
    return written


def _cost_chart(results: dict[str, Any], out: Path) -> None:
    """Cost per solved task against catalog size (left), next to what running the solved tasks
    cost the machine (right): the sandbox's and the broker's CPU seconds per solved task, with
    the sandbox's peak memory. The resource side is measured once: growing the catalog re-prices
    the conversations, it does not run them again."""
    import matplotlib.pyplot as plt

    summary: dict[str, dict[str, Any]] = results["summary"]
    costs: list[dict[str, Any]] = results["catalog"]["cost_per_success_usd"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=90, width_ratios=(3, 2))
    for mode in ("direct", "codemode"):
        series = [(c["tools"], c.get(mode)) for c in costs]
        solved = [(tools, cost) for tools, cost in series if cost is not None]
        if solved:
            left.plot(*zip(*solved, strict=True), "o-", label=LABELS[mode], color=COLORS[mode])
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("tools in the catalog")
    left.set_ylabel("USD per solved task (tokens)")
    left.set_title("Cost per solved task against catalog size", fontsize=10)
    left.legend(fontsize=8)
    modes = [m for m in ("direct", "codemode") if m in summary]
    for x, mode in enumerate(modes):
        s = summary[mode]
        per = max(s["passed"], 1)
        sandbox, broker = s["sandbox_cpu_s"], s["broker_cpu_s"]
        right.bar(x, (sandbox or 0.0) / per, 0.6, color=COLORS[mode], label="sandbox CPU" if x == 0 else None)
        right.bar(
            x,
            (broker or 0.0) / per,
            0.6,
            bottom=(sandbox or 0.0) / per,
            color=COLORS[mode],
            alpha=0.45,
            hatch="//",
            label="broker CPU" if x == 0 else None,
        )
        peak = "n/a" if s["sandbox_peak_mb"] is None else f"{s['sandbox_peak_mb']:.0f} MB peak"
        cpu = "n/a" if sandbox is None else f"{sandbox / per:.3f} s"
        broker_text = "n/a" if broker is None else f"{broker / per:.3f} s"
        right.annotate(
            f"sandbox {cpu}\nbroker {broker_text}\n{peak}",
            (x, ((sandbox or 0.0) + (broker or 0.0)) / per),
            ha="center",
            va="bottom",
            fontsize=7,
        )
    right.set_xticks(range(len(modes)), [LABELS[m] for m in modes], fontsize=8)
    right.set_ylabel("CPU seconds per solved task")
    right.set_title("Resource cost (measured, any catalog size)", fontsize=10)
    right.margins(y=0.45)
    right.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / COST_CHART)
    plt.close(fig)
