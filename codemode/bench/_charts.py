"""PNG charts of a benchmark run. The only module that imports matplotlib (the ``bench`` extra):
without it the run still writes everything else and says which charts are missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TASK_CHART = "tokens_per_task.png"
CATALOG_CHART = "tokens_vs_catalog.png"


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
    return written
