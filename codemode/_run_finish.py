"""The end of a run: everything that leaves it passes the final result filter."""

from __future__ import annotations

from typing import Any

from codemode._run_result import RunErrorInfo, RunResult
from codemode._tokens import count_tokens
from codemode.broker import Broker, FilterReport
from codemode.calls import RunBinding
from codemode.sandbox import RunOutcome


def finished_run(
    broker: Broker, binding: RunBinding, outcome: RunOutcome, *, measure_tokens: bool
) -> RunResult:
    """What leaves a run: its value, output and error through the run's final filter (the run is
    closed in the broker), with the broker's counts. With ``measure_tokens``, token counts too."""
    final_filter = broker.final_filter(binding.run_id)
    report = FilterReport()
    value = outcome.final
    filtered: Any = final_filter.value(value, report)
    stdout = final_filter.text(outcome.stdout, report)
    stderr = final_filter.text(outcome.stderr, report)
    error: RunErrorInfo | None = None
    if outcome.error is not None:
        error = RunErrorInfo(
            kind=outcome.error.kind,
            type=outcome.error.type,
            message=final_filter.text(outcome.error.message, report),
            traceback=final_filter.text(outcome.error.traceback, report),
        )
    summary = broker.close_run(binding.run_id)
    flags = list(summary.flags)
    if report.injection_suspected:
        flags.append("instruction-like text in the final result")
    result = RunResult(
        status=outcome.status,
        result=filtered,
        result_kind="json"
        if outcome.result_kind == "json" and not outcome.result_truncated
        else ("stdout" if outcome.result_kind == "stdout" else "repr"),
        stdout=stdout,
        stderr=stderr,
        error=error,
        run_id=binding.run_id,
        principal=binding.principal,
        tenant=binding.tenant,
        session_id=binding.session_id,
        calls=summary.calls,
        denials=summary.denials,
        duration_ms=outcome.duration_ms,
        backend=outcome.backend,
        result_truncated=outcome.result_truncated,
        stdout_truncated=outcome.stdout_truncated,
        stderr_truncated=outcome.stderr_truncated,
        secrets_redacted=report.secrets_redacted,
        pii_tokenized=report.pii_tokenized,
        flags=tuple(flags),
        peak_concurrency=summary.peak_concurrency,
        unknown_outcomes=summary.unknown_outcomes,
        tool_result_bytes=summary.result_bytes,
        tool_result_tokens=summary.result_tokens if measure_tokens else None,
    )
    if measure_tokens:
        result = result.model_copy(update={"final_tokens": count_tokens(result.model_text())})
    return result
