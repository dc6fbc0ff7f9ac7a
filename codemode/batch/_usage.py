"""What a batch's items cost the machine: totals, and the per-item median and 95th percentile.

Each item's figures are those of its program's run (``RunResult.usage`` and ``broker_cpu_s``;
the verify program's run is not in them). Only items run by this invocation are counted: a
resumed job's earlier items were measured by the invocation that ran them.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from codemode._run_usage import RunUsage

__all__ = ["UsageTally", "percentile"]


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of a non-empty list: always one of the
    values, so a p95 of a few items is the largest, not an interpolation."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _spread(values: list[float], digits: int) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "total": round(sum(values), digits),
        "p50": round(percentile(values, 0.5), digits),
        "p95": round(percentile(values, 0.95), digits),
    }


class UsageTally:
    """Adds up the items' usage as they settle (:meth:`add`), for the batch summary."""

    def __init__(self) -> None:
        self._cpu: list[float] = []
        self._peak: list[float] = []
        self._channel_in: list[float] = []
        self._channel_out: list[float] = []
        self._broker: list[float] = []
        self._caps: Counter[str] = Counter()

    def add(self, usage: RunUsage | None, broker_cpu_s: float | None) -> None:
        """One item's run (None: it never reached a sandbox, or was not measured)."""
        if usage is not None:
            if usage.cpu_s is not None:
                self._cpu.append(usage.cpu_s)
            if usage.peak_mb is not None:
                self._peak.append(usage.peak_mb)
            self._channel_in.append(usage.channel_in_bytes)
            self._channel_out.append(usage.channel_out_bytes)
            if usage.cap_hit is not None:
                self._caps[usage.cap_hit] += 1
        if broker_cpu_s is not None:
            self._broker.append(broker_cpu_s)

    def to_json(self) -> dict[str, Any]:
        """``{"sandbox_cpu_s": {"total", "p50", "p95"}, ...}``; a figure no item measured is None.

        The peak has a ``max`` (the largest item's) instead of a total: memory held by items one
        after another does not add up the way CPU time does."""
        peak = _spread(self._peak, 1)
        if peak is not None:
            del peak["total"]
            peak = {"max": round(max(self._peak), 1), **peak}  # rounded like p50 and p95
        return {
            "sandbox_cpu_s": _spread(self._cpu, 3),
            "sandbox_peak_mb": peak,
            "channel_in_bytes": _spread(self._channel_in, 0),
            "channel_out_bytes": _spread(self._channel_out, 0),
            "broker_cpu_s": _spread(self._broker, 4),
            "caps_hit": dict(sorted(self._caps.items())),
        }
