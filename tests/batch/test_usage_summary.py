"""A batch summary says what the items run now cost: totals, and p50/p95 per item."""

from __future__ import annotations

import json

import pytest

from codemode._run_usage import CapHit, RunUsage
from codemode.batch import UsageTally
from codemode.batch._usage import percentile
from codemode.cli._batch_cmd import _cost_line  # pyright: ignore[reportPrivateUsage]

from .conftest import MakeWorkspace


def test_percentiles_are_nearest_rank_values_of_the_items() -> None:
    values = [float(n) for n in range(1, 21)]  # 1 .. 20
    assert (percentile(values, 0.5), percentile(values, 0.95)) == (10.0, 19.0)
    assert percentile([3.0, 1.0, 2.0], 0.95) == 3.0, "a p95 of a few items is the largest"
    assert percentile([7.0], 0.5) == 7.0


def test_the_tally_adds_cpu_and_channel_takes_the_largest_peak_and_counts_caps() -> None:
    tally = UsageTally()
    runs: list[tuple[float, float, CapHit | None]] = [
        (0.5, 40.0, None),
        (1.5, 200.0, "memory"),
        (1.0, 60.0, None),
    ]
    for cpu, peak, cap in runs:
        usage = RunUsage(cpu_s=cpu, peak_mb=peak, channel_in_bytes=1000, channel_out_bytes=10, cap_hit=cap)
        tally.add(usage, broker_cpu_s=0.002)
    tally.add(None, None)  # an item that never reached a sandbox counts in nothing
    summary = tally.to_json()
    assert summary["sandbox_cpu_s"] == {"total": 3.0, "p50": 1.0, "p95": 1.5}
    assert summary["sandbox_peak_mb"] == {"max": 200.0, "p50": 60.0, "p95": 200.0}
    assert summary["channel_in_bytes"] == {"total": 3000, "p50": 1000, "p95": 1000}
    assert summary["broker_cpu_s"] == {"total": 0.006, "p50": 0.002, "p95": 0.002}
    assert summary["caps_hit"] == {"memory": 1}
    line = _cost_line(summary)
    assert "sandbox CPU 3.00 s (p50 1.00 s, p95 1.50 s per item)" in line
    assert "peak 200 MB" in line and "stopped by a cap: memory 1" in line


def test_the_largest_peak_is_rounded_like_its_percentiles() -> None:
    tally = UsageTally()
    for peak in (9.15, 9.19):  # p95 9.19 rounds up to 9.2: the max must too, or p95 > max
        tally.add(RunUsage(peak_mb=peak), None)
    peak_mb = tally.to_json()["sandbox_peak_mb"]
    assert peak_mb == {"max": 9.2, "p50": 9.2, "p95": 9.2}


def test_what_nothing_measured_is_none_not_zero() -> None:
    tally = UsageTally()
    tally.add(RunUsage(), None)  # a backend that cannot measure (the in-process one)
    summary = tally.to_json()
    assert summary["sandbox_cpu_s"] is None and summary["sandbox_peak_mb"] is None
    assert summary["broker_cpu_s"] is None and summary["caps_hit"] == {}
    assert _cost_line(summary) == ""


@pytest.mark.integration
def test_batch_json_reports_the_cost_of_the_items_run_now(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace()
    args = ["batch", str(ws.program()), "--inputs", str(ws.items(3)), "--key", "id", "--job-id", "cost"]
    first = ws.cli(*args, "--json")
    assert first.returncode == 0, first.stderr
    cost = json.loads(first.stdout)["usage_now"]
    cpu, peak = cost["sandbox_cpu_s"], cost["sandbox_peak_mb"]
    assert cpu["total"] > 0 and cpu["p50"] <= cpu["p95"] <= cpu["total"]
    assert peak["max"] > 0 and peak["p50"] <= peak["p95"] <= peak["max"]
    assert cost["channel_out_bytes"]["total"] > 0 and cost["broker_cpu_s"]["total"] > 0
    assert cost["caps_hit"] == {}
    # A finished job runs nothing: nothing was measured now.
    again = ws.cli(*args, "--json")
    assert json.loads(again.stdout)["usage_now"]["sandbox_cpu_s"] is None
