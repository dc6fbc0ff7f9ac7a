"""What one task run in one mode cost, as ``results.json`` holds it: tokens turn by turn, where
the wall time went, what the sandbox and the broker used, and what the broker's gates decided."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from codemode.bench._accounting import TurnCost
from codemode.bench._model import Mode
from codemode.engine import RunResult

MEASURED = (
    "mcp_calls",
    "calls_denied",
    "denied",
    "arguments_checked",
    "arguments_denied",
    "wall_s",
    "model_s",
    "discovery_s",
    "execution_s",
    "sandbox_cpu_s",
    "sandbox_peak_mb",
    "channel_in_bytes",
    "channel_out_bytes",
    "broker_cpu_s",
    "caps_hit",
    "compensation_needed",
    "compensated",
)
"""What only the live run could measure: a replay of its recording takes these as recorded (the
tokens, the answer and its check are computed again from the recorded requests and replies)."""


@dataclass
class TaskRun:
    task: str
    mode: Mode
    passed: bool
    answer: str
    error: str | None
    turns: list[TurnCost] = field(default_factory=lambda: [])
    tool_calls: int = 0
    """Tool calls the model made (in code mode: run_code and discovery calls)."""
    mcp_calls: int = 0
    """MCP tool calls the broker judged while the task ran, allowed or denied (ledger rows)."""
    calls_denied: int = 0
    """Of those, the calls a gate denied."""
    denied: dict[str, int] = field(default_factory=lambda: {})
    """Denials per ``gate:server/tool``."""
    arguments_checked: int = 0
    """Calls that reached the arguments gate (the argument-schema check)."""
    arguments_denied: int = 0
    """Calls whose arguments did not match the tool's pinned schema."""
    wall_s: float = 0.0
    model_s: float = 0.0
    """Wall time waiting for the model (or the scripted agent) to answer."""
    discovery_s: float = 0.0
    """Wall time of the discovery tools: search_tools, list_files, read_file."""
    execution_s: float = 0.0
    """Wall time of the calls that do the work: run_code, or direct MCP tool calls."""
    sandbox_cpu_s: float | None = None
    """CPU seconds (user + system) of the task's sandbox runs, as each run accounted them; 0 when
    no sandbox ran (direct mode, or code mode that answered without run_code); None when a run
    could not say."""
    sandbox_peak_mb: float | None = None
    """The highest peak memory of any of the task's sandbox runs."""
    channel_in_bytes: int | None = None
    channel_out_bytes: int | None = None
    """Bytes into and out of the sandbox over its channel (the only network a sandbox has)."""
    broker_cpu_s: float | None = None
    """The broker's own CPU time for the task's runs (None in direct mode: not accounted there)."""
    caps_hit: list[str] = field(default_factory=lambda: [])
    """Resource caps a run hit (memory, CPU time, pids), one entry per run that hit one."""
    refrained: bool | None = None
    """For a task that says how many calls its answer needs: whether this run kept to it."""
    compensation_needed: int = 0
    """Sandbox runs of the task that failed and left side effects (read from the ledger)."""
    compensated: int = 0
    """Of those, the runs whose side effects were all undone (``[compensation]``)."""
    trial: int = 0
    job: int = 0
    """Which of the task's jobs (0: its prompt; 1 on: a skills task's variations)."""
    api_usage: list[dict[str, int]] = field(default_factory=lambda: [])
    """With a real model: the token usage its API reported, per request (next to our count)."""

    @property
    def input_tokens(self) -> int:
        return sum(t.input_tokens for t in self.turns)

    @property
    def output_tokens(self) -> int:
        return sum(t.output_tokens for t in self.turns)

    @property
    def valid_call_rate(self) -> float | None:
        """Calls that passed every gate / calls attempted (None when none was attempted)."""
        return rate(self.mcp_calls - self.calls_denied, self.mcp_calls)

    @property
    def compensation_rate(self) -> float | None:
        """Runs fully undone / runs that failed with side effects (None: none needed undoing)."""
        return rate(self.compensated, self.compensation_needed)

    @property
    def schema_pass_rate(self) -> float | None:
        """Calls whose arguments matched the schema / calls the arguments gate checked."""
        return rate(self.arguments_checked - self.arguments_denied, self.arguments_checked)

    def measured(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in MEASURED}

    def no_sandbox(self) -> None:
        """No sandbox ran (yet): it cost nothing, which is a measurement, not an unknown."""
        self.sandbox_cpu_s, self.sandbox_peak_mb = 0.0, 0.0
        self.channel_in_bytes, self.channel_out_bytes = 0, 0

    def add_run(self, result: RunResult) -> None:
        """Add one sandbox run's resource use. A figure the run could not measure makes the
        task's figure unknown: a sum that left it out would read as a measurement."""
        usage = result.usage
        cpu, peak = (None, None) if usage is None else (usage.cpu_s, usage.peak_mb)
        self.sandbox_cpu_s = _known(self.sandbox_cpu_s, cpu, lambda a, b: round(a + b, 3))
        self.sandbox_peak_mb = _known(self.sandbox_peak_mb, peak, lambda a, b: max(a, round(b, 1)))
        if usage is None or self.channel_in_bytes is None or self.channel_out_bytes is None:
            self.channel_in_bytes = self.channel_out_bytes = None
        else:
            self.channel_in_bytes += usage.channel_in_bytes
            self.channel_out_bytes += usage.channel_out_bytes
        if usage is not None and usage.cap_hit is not None:
            self.caps_hit.append(usage.cap_hit)
        self.broker_cpu_s = _known(self.broker_cpu_s, result.broker_cpu_s, lambda a, b: round(a + b, 3))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["input_tokens"] = self.input_tokens
        out["output_tokens"] = self.output_tokens
        out["total_tokens"] = self.input_tokens + self.output_tokens
        out["valid_call_rate"] = self.valid_call_rate
        out["schema_pass_rate"] = self.schema_pass_rate
        out["compensation_rate"] = self.compensation_rate
        return out


def rate(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def _known(total: float | None, value: float | None, add: Callable[[float, float], float]) -> float | None:
    """``add(total, value)``, or None once either is unknown (a sum that left one out would read as
    a measurement)."""
    return None if total is None or value is None else add(total, value)
