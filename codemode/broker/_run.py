"""A run's life in the broker: its state (counters for budgets, the PII vault) and its scope.

:class:`RunScope` owns the order of a run's life - begun in the ledger, opened, what leaves it
filtered, closed, its end recorded - so every entry point that runs something gets it right.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from types import TracebackType
from typing import Any, Self, TypedDict

import anyio

from codemode.broker._approvals import Approver
from codemode.broker._approved_plan import ApprovedPlan
from codemode.broker._inputs import Elicitor, Sampler
from codemode.broker._pii import PiiVault
from codemode.broker._planning import Planner
from codemode.broker._results import FilterReport, ResultFilter
from codemode.calls import ProgressListener, RunBinding
from codemode.config import ResultPolicy
from codemode.ledger import Clock, Ledger, system_clock


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
    denied: Counter[str] = field(default_factory=lambda: Counter[str]())
    """Every denial by a gate, per ``gate:server/name``, in the order first seen (recorded or not)."""
    failed_calls: int = 0
    """Calls the gates let through that did not succeed (an error answer, a timeout, a refusal)."""
    unknown_outcomes: int = 0
    """Calls of this run whose outcome is unknown (sent, never answered; or an earlier attempt
    under the same key is unknown): the run's work must be reconciled, not retried."""
    occurrences: Counter[str] = field(default_factory=lambda: Counter[str]())
    """How often each (tool, arguments) pair was called, for derived idempotency keys."""
    limits: RunLimits = field(default_factory=RunLimits)
    planner: Planner | None = None
    """Set for a dry run: calls not known to be read-only are planned here, not sent."""
    approved_plan: ApprovedPlan | None = None
    """Set for a run under an approved plan: its matching calls pass consent without asking."""

    def __post_init__(self) -> None:
        self.started = self.clock()

    def elapsed(self) -> float:
        return (self.clock() - self.started).total_seconds()

    def summary(self) -> RunSummary:
        flags = set(self.flags)
        for kind, count in self.denials_unrecorded.items():
            gate, _, label = kind.partition(":")
            flags.add(f"{count} more denials of {label} by the {gate} gate were counted, not recorded singly")
        if self.approved_plan is not None:
            flags.update(self.approved_plan.flags())
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
            denied=tuple(self.denied),
            failed_calls=self.failed_calls,
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
    denied: tuple[str, ...] = ()
    """What the gates denied, as ``gate:server/name``, first seen first: with ``calls`` and
    ``failed_calls``, whether another run of the same program would be denied the same."""
    failed_calls: int = 0


class RunOptions(TypedDict, total=False):
    """Who answers for a run besides the policy, and its own caps (each optional)."""

    approver: Approver | None
    """Approves this run's risky calls instead of the broker's approver."""
    limits: RunLimits | None
    """Tightens the policy's budgets for this run (a batch item's limits)."""
    elicitor: Elicitor | None
    """The person who answers this run's servers' requests for input (none: refused)."""
    sampler: Sampler | None
    """The model that answers this run's servers' requests for completions (none: refused)."""
    on_call_progress: ProgressListener | None
    """Hears what this run's calls in flight report (progress, a task's status)."""
    planner: Planner | None
    """Makes the run a dry run: its calls not known to be read-only are planned, not sent."""
    approved_plan: ApprovedPlan | None
    """The approved plan the run follows: a call matching a planned call needs no other approval."""


@dataclass(frozen=True)
class RunOutput:
    """What a run hands its caller, as plain values: its final value and the texts it left.

    :meth:`RunScope.finish` takes it as the run left it and returns it through the final filter."""

    value: Any = None
    stdout: str = ""
    stderr: str = ""
    error_message: str | None = None
    error_traceback: str | None = None


@dataclass(frozen=True)
class RunEnd:
    """A finished run: its output through the final filter, its counts, what the filter did."""

    output: RunOutput
    summary: RunSummary
    report: FilterReport

    @property
    def flags(self) -> tuple[str, ...]:
        """The summary's flags, and the final filter's (instruction-like text in the output)."""
        return self.summary.flags + ((INJECTION_FLAG,) if self.report.injection_suspected else ())


INJECTION_FLAG = "instruction-like text in the final result"


class RunScope:
    """One run's life, in the one order that keeps the ledger and the broker true.

    ``async with broker.run(binding, code_digest) as scope``: entering records the run's start in
    the ledger, then opens the run in the broker (its calls are accepted from then on).
    ``scope.finish(status, output)`` passes ``output`` through the run's final filter - with the
    run's PII vault, so what a tool result tokenised stays tokenised - then closes the run (no
    call is accepted after). Leaving records the end in the ledger with the run's counts,
    shielded from cancellation: ``status``, or ``interrupted`` when the block raised or was
    cancelled (its caller never got the result). A run cancelled before it began leaves no
    record. A scope is entered once and finished once.
    """

    def __init__(
        self,
        binding: RunBinding,
        code_digest: str,
        *,
        ledger: Ledger,
        results: ResultPolicy,
        open_run: Callable[[], RunState],
        close_run: Callable[[str], RunSummary],
        record: Mapping[str, Any] | None = None,
        begin: Callable[[], object] | None = None,
        end: Callable[[], None] | None = None,
    ) -> None:
        self.binding = binding
        self._code_digest = code_digest
        self._ledger = ledger
        self._results = results
        self._open_run = open_run
        self._close_run = close_run
        self._begin = begin or partial(ledger.begin_run, binding, code_digest)
        """Records the run's start (and takes its quotas: it may raise ``QuotaExceededError``)."""
        self._end = end
        """Frees what the run held (its concurrent-run slot) once its end is recorded."""
        self._record = dict(record or {})
        """Fields of the run's ledger record however it ends (why codemode itself made the run)."""
        self._entered = False
        self._state: RunState | None = None
        self._summary: RunSummary | None = None
        self._status: str | None = None
        """What :meth:`finish` said; None until it has."""
        self._left = False

    @property
    def state(self) -> RunState:
        """The run's state in the broker (counters, vault), from entering on."""
        if self._state is None:
            raise RuntimeError(f"run {self.binding.run_id} is not open: enter it with `async with`")
        return self._state

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError(f"run {self.binding.run_id} was entered before: a RunScope is used once")
        self._entered = True
        # Recorded before it is opened: no call of the run can reach a server before the ledger
        # knows the run (a crash then leaves a "running" run that recovery marks interrupted).
        # A refusal by a quota raises here: the run never opens (the ledger records the refusal).
        await anyio.to_thread.run_sync(self._begin)
        self._state = self._open_run()
        return self

    def finish(self, status: str, output: RunOutput = RunOutput()) -> RunEnd:
        """End the run with ``status``: ``output`` through the final filter, then the run closed.
        Fields known only now (the duration, what the run cost) go to its record by :meth:`note`."""
        state = self.state
        if self._status is not None or self._left:
            raise RuntimeError(f"run {self.binding.run_id} has finished already: finish() is called once")
        if not status or status in ("running", "interrupted"):
            # Checked now, not when the end is recorded: the ledger would refuse "running", and
            # "interrupted" is what leaving the block unfinished records, not a caller's status.
            raise ValueError(f"a run finishes with its final status ('ok', 'error', ...), not {status!r}")
        final = ResultFilter(self._results, state.vault)
        report = FilterReport()
        filtered = RunOutput(  # in this order: the vault numbers placeholders as it meets them
            value=final.value(output.value, report),
            stdout=final.text(output.stdout, report),
            stderr=final.text(output.stderr, report),
            error_message=None if output.error_message is None else final.text(output.error_message, report),
            error_traceback=None
            if output.error_traceback is None
            else final.text(output.error_traceback, report),
        )
        summary = self._close()
        self._status = status
        return RunEnd(output=filtered, summary=summary, report=report)

    def note(self, **fields: Any) -> None:
        """Add fields to the run's ledger record (written when the ``async with`` block is left),
        after :meth:`finish` too: what the run cost is known only once it has finished."""
        if self._left:
            raise RuntimeError(f"run {self.binding.run_id} is recorded already: note() comes before leaving")
        self._record.update(fields)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._state is None:
            return
        self._left = True
        summary = self._close()
        unfinished = exc is None and self._status is None
        status = self._status if exc is None and self._status is not None else "interrupted"
        record = {"calls": summary.calls, "denials": summary.denials, **self._record}
        finish = partial(self._ledger.finish_run, self.binding.run_id, status, record)
        with anyio.CancelScope(shield=True):  # a cancelled run is recorded as such, not left "running"
            try:
                await anyio.to_thread.run_sync(finish)
            finally:
                if self._end is not None:  # its slot is freed even if the end could not be written
                    await anyio.to_thread.run_sync(self._end)
        if unfinished:
            raise RuntimeError(
                f"run {self.binding.run_id} was left without finish(): it is recorded as interrupted; "
                "call scope.finish(status, output) before leaving the `async with` block"
            )

    def _close(self) -> RunSummary:
        """Close the run in the broker once; later calls return the same summary."""
        if self._summary is None:
            self._summary = self._close_run(self.binding.run_id)
        return self._summary
