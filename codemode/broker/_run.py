"""Per-run state the broker keeps: counters for budgets and the PII vault."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import anyio

from codemode.broker._approvals import Approver
from codemode.broker._inputs import Elicitor, Sampler
from codemode.broker._pii import PiiVault
from codemode.calls import ProgressListener, RunBinding
from codemode.ledger import Clock, system_clock


@dataclass(frozen=True)
class RunLimits:
    """Per-run caps that can only tighten the policy's budgets (a batch job's per-item limits)."""

    calls: int | None = None
    money: float | None = None
    sampling_tokens: int | None = None


@dataclass
class RunState:
    binding: RunBinding
    clock: Clock = system_clock
    """The broker's wall clock: the run's wall-time budget is counted on it (tests move it)."""
    started: datetime = field(init=False)
    calls_allowed: int = 0
    denials: int = 0
    calls_per_tool: Counter[str] = field(default_factory=lambda: Counter[str]())
    result_bytes: int = 0
    result_tokens: int = 0
    """Tokens of every tool result the program received (counted only when the broker measures)."""
    money_spent: float = 0.0
    in_flight: int = 0
    peak_in_flight: int = 0
    vault: PiiVault = field(default_factory=PiiVault)
    flags: set[str] = field(default_factory=lambda: set[str]())
    lock: threading.Lock = field(default_factory=threading.Lock)
    concurrency: anyio.Semaphore | None = None
    approver: Approver | None = None
    """Who approves this run's risky calls (e.g. the MCP client that asked for the run)."""
    on_call_progress: ProgressListener | None = None
    """Hears what this run's calls in flight report (progress notifications, task status)."""
    elicitor: Elicitor | None = None
    """The person who answers this run's servers' requests for input (never the program)."""
    sampler: Sampler | None = None
    """The model that answers this run's servers' requests for completions (never the program)."""
    sampling_tokens: int = 0
    """Tokens of the completions relayed for this run's servers (prompts and replies)."""
    sampling_reserved: int = 0
    """Tokens set aside for completions being asked right now (prompt plus ``maxTokens``)."""
    denials_recorded: Counter[str] = field(default_factory=lambda: Counter[str]())
    """Denials written to the ledger, per ``gate:server/tool`` (a flood is recorded as a count)."""
    denials_unrecorded: Counter[str] = field(default_factory=lambda: Counter[str]())
    unknown_outcomes: int = 0
    """Calls of this run whose outcome is unknown (sent, never answered; or an earlier attempt
    under the same key is unknown): the run's work must be reconciled, not retried."""
    occurrences: Counter[str] = field(default_factory=lambda: Counter[str]())
    limits: RunLimits = field(default_factory=RunLimits)
    """How often each (tool, arguments) pair was called, for derived idempotency keys."""

    def __post_init__(self) -> None:
        self.started = self.clock()

    def elapsed(self) -> float:
        return (self.clock() - self.started).total_seconds()

    def summary(self) -> RunSummary:
        flags = set(self.flags)
        for kind, count in self.denials_unrecorded.items():
            gate, _, label = kind.partition(":")
            flags.add(f"{count} more denials of {label} by the {gate} gate were counted, not recorded singly")
        return RunSummary(
            run_id=self.binding.run_id,
            calls=self.calls_allowed,
            denials=self.denials,
            peak_concurrency=self.peak_in_flight,
            result_bytes=self.result_bytes,
            result_tokens=self.result_tokens,
            money_spent=self.money_spent,
            flags=tuple(sorted(flags)),
            unknown_outcomes=self.unknown_outcomes,
        )


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    calls: int
    denials: int
    peak_concurrency: int
    result_bytes: int
    result_tokens: int
    money_spent: float
    flags: tuple[str, ...]
    unknown_outcomes: int = 0
