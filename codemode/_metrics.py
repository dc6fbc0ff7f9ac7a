"""Prometheus metrics of the broker and runs, for ``codemode serve --transport http --metrics``.

Off unless enabled: the broker and engine call :func:`active` and record only when it returns
a :class:`Metrics`. The counters are per process and start at zero; the ledger stays the record
of what happened. ``prometheus_client`` comes with the ``otel`` extra and is imported only here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode._run_usage import RunUsage
from codemode.calls import CallDenied, CallOutcome
from codemode.errors import CodemodeError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_active: Metrics | None = None


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry: CollectorRegistry = CollectorRegistry()
        registry = self.registry
        self.calls = Counter(
            "codemode_tool_calls",
            "Tool calls by outcome, by decision (allowed or denied) and by the gate that denied them",
            ["outcome", "decision", "gate"],
            registry=registry,
        )
        self.denials = Counter("codemode_denials", "Tool calls denied, by gate", ["gate"], registry=registry)
        self.broker_seconds = Histogram(
            "codemode_broker_seconds",
            "Time of a tool call in the broker: gates, ledger, the MCP call and the result filter",
            registry=registry,
        )
        self.mcp_seconds = Histogram(
            "codemode_mcp_call_seconds", "Time of the MCP call alone", ["server"], registry=registry
        )
        self.runs = Counter("codemode_runs", "Runs by final status", ["status"], registry=registry)
        self.result_bytes = Counter(
            "codemode_result_bytes", "Bytes of tool results that passed the result filter", registry=registry
        )
        self.sandbox_start_seconds = Histogram(
            "codemode_sandbox_start_seconds",
            "Time to start a sandbox until its runtime is connected, by backend",
            ["backend"],
            registry=registry,
        )
        self.run_cpu_seconds = Histogram(
            "codemode_run_sandbox_cpu_seconds",
            "CPU time (user + system) of a run's sandbox processes, by backend",
            ["backend"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=registry,
        )
        self.run_peak_mb = Histogram(
            "codemode_run_sandbox_peak_mb",
            "Peak memory of a run's sandbox in MiB, by backend",
            ["backend"],
            buckets=(16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
            registry=registry,
        )
        self.run_channel_bytes = Histogram(
            "codemode_run_channel_bytes",
            "Bytes over a run's sandbox channel, by direction (in: to the sandbox, out: from it)",
            ["direction"],
            buckets=(1e3, 1e4, 1e5, 1e6, 1e7, 1e8),
            registry=registry,
        )
        self.run_broker_cpu_seconds = Histogram(
            "codemode_run_broker_cpu_seconds",
            "The broker's CPU time for one run's calls, on the event loop",
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=registry,
        )
        self.run_caps_hit = Counter(
            "codemode_run_caps_hit",
            "Runs stopped or refused by a sandbox cap, by cap",
            ["cap"],
            registry=registry,
        )
        self.quota_refusals = Counter(
            "codemode_quota_refusals",
            "Runs and tool calls refused by a quota of [policy.quotas], by what and which quota",
            ["what", "quota"],
            registry=registry,
        )
        self.warm_pool_ready = Gauge(
            "codemode_warm_pool_ready", "Warm sandboxes ready to take a run", registry=registry
        )

    def call_finished(self, outcome: CallOutcome, seconds: float) -> None:
        denied = isinstance(outcome, CallDenied)
        gate = outcome.gate if isinstance(outcome, CallDenied) else ""
        self.calls.labels(outcome.kind, "denied" if denied else "allowed", gate).inc()
        if isinstance(outcome, CallDenied):
            self.denials.labels(outcome.gate).inc()
        self.broker_seconds.observe(seconds)

    def run_finished(self, backend: str, usage: RunUsage | None, broker_cpu_s: float | None) -> None:
        """What a run cost: observed where measured (an unmeasured number is not a zero)."""
        if usage is not None:
            if usage.cpu_s is not None:
                self.run_cpu_seconds.labels(backend).observe(usage.cpu_s)
            if usage.peak_mb is not None:
                self.run_peak_mb.labels(backend).observe(usage.peak_mb)
            self.run_channel_bytes.labels("in").observe(usage.channel_in_bytes)
            self.run_channel_bytes.labels("out").observe(usage.channel_out_bytes)
            if usage.cap_hit is not None:
                self.run_caps_hit.labels(usage.cap_hit).inc()
        if broker_cpu_s is not None:
            self.run_broker_cpu_seconds.observe(broker_cpu_s)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def enable() -> Metrics:
    """Start recording (idempotent); the metrics to expose."""
    global _active
    if _active is None:
        try:
            _active = Metrics()
        except ImportError as exc:
            # One line, and a CodemodeError: the CLI shows it without a traceback and exits 2.
            raise CodemodeError(
                f"--metrics needs prometheus_client, which cannot be imported ({exc}): "
                "pip install 'codemode[otel]'"
            ) from None
    return _active


def active() -> Metrics | None:
    return _active
