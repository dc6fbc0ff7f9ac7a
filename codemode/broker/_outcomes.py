"""What a tool's answer becomes: the copy the ledger keeps and the copy the program gets.

Two passes, so that a replay in another run gets that run's placeholders, never this one's:

==============  ===========================================================================
pass            what it does
==============  ===========================================================================
storage         secrets redacted, PII left in clear, size capped: what the ledger stores and
                what a later call with the same idempotency key is replayed
per run         PII tokenised with the run's vault, instruction-like text flagged, bytes (and,
                when measured, tokens) counted against the run; fresh and replayed alike
==============  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import mcp_types

from codemode._metrics import active as active_metrics
from codemode._redaction import redact_secrets
from codemode._tracing import note, note_filtering
from codemode.broker._facts import Call
from codemode.broker._pii import PiiVault, json_scan_text, pii_kinds_in
from codemode.broker._receipts import find_receipt
from codemode.broker._results import FilterReport, ResultFilter, unique_content
from codemode.calls import CallDenied, CallFailed, CallOutcome, ToolError, ToolResult, content_blocks
from codemode.catalog import canonical_json
from codemode.config import ResultPolicy


class Answer(NamedTuple):
    """One fresh answer, filtered both ways."""

    outcome: CallOutcome
    """What the program gets."""
    stored: ToolResult | ToolError
    """What the ledger keeps (and replays)."""
    receipt: str | None
    filtered: dict[str, int | bool]
    """What the filters changed (counts and flags), as the ledger records it."""


class Outcomes:
    def __init__(self, policy: ResultPolicy, count_tokens: Callable[[str], int] | None) -> None:
        self._policy = policy
        self._storage_filter = ResultFilter(policy.model_copy(update={"pii": "off"}), PiiVault())
        self._per_run_policy = policy.model_copy(update={"redact_secrets": False})
        self.count_tokens = count_tokens
        """When set, tokens of every tool result are counted (for token-cost comparisons)."""

    def fresh(self, call: Call, result: mcp_types.CallToolResult) -> Answer:
        content = unique_content(result)
        stored, report = self._storage_filter.tool_result(result, content)
        receipt = find_receipt(result, content)
        note(receipt=receipt)
        # Filtered for the run before the record, so that the record holds the whole report.
        outcome = self.for_run(call, stored, report, injection_scanned=True)
        filtered = report.as_dict()
        note_filtering(filtered)
        return Answer(outcome, stored, receipt, filtered)

    def for_run(
        self,
        call: Call,
        outcome: CallOutcome,
        report: FilterReport | None = None,
        *,
        injection_scanned: bool = False,
    ) -> CallOutcome:
        """The per-run pass (see the table above). What it changes is added to ``report``.

        ``injection_scanned``: the storage pass of this very answer has already looked for
        instruction-like text, so only PII is left to find. The outcome is then visited field by
        field only when its JSON text as a whole, escapes decoded, holds a PII candidate (a match
        inside any field is a match in that text: see :func:`json_scan_text`). Most answers hold
        none and go through unchanged, without being copied.
        """
        run = call.run
        report = FilterReport() if report is None else report
        encoded = canonical_json(outcome.model_dump(mode="json"))
        text = encoded.decode()
        if not injection_scanned or self._may_hold_pii(text):
            outcome = self._run_pass(run.vault, outcome, report)
            encoded = canonical_json(outcome.model_dump(mode="json"))
            text = encoded.decode()
        tokens = self.count_tokens(text) if self.count_tokens is not None else 0
        with run.lock:
            run.result_bytes += len(encoded)
            run.result_tokens += tokens
            if report.injection_suspected:
                run.flags.add(f"instruction-like text in {call.label} result")
        metrics = active_metrics()
        if metrics is not None:
            metrics.result_bytes.inc(len(encoded))
        return outcome

    def reason_for_run(self, outcome: CallOutcome, vault: PiiVault | None) -> CallOutcome:
        """A denial's or failure's reason as the program may see it: secrets redacted and PII
        tokenised with the run's vault (none: the run is gone), like any answer. Reasons quote
        argument values (after placeholders were mapped back to the real ones) and servers' error
        texts."""
        if not isinstance(outcome, CallDenied | CallFailed):
            return outcome
        if vault is None:
            return outcome.model_copy(update={"reason": redact_secrets(outcome.reason)[0]})
        reason = ResultFilter(self._policy, vault).text(outcome.reason, FilterReport())
        return outcome if reason == outcome.reason else outcome.model_copy(update={"reason": reason})

    def _may_hold_pii(self, text: str) -> bool:
        policy = self._per_run_policy
        return (
            policy.pii != "off"
            and bool(policy.pii_kinds)
            and bool(pii_kinds_in(json_scan_text(text), policy.pii_kinds, fields=True))
        )

    def _run_pass(self, vault: PiiVault, outcome: CallOutcome, report: FilterReport) -> CallOutcome:
        result_filter = ResultFilter(self._per_run_policy, vault)
        if isinstance(outcome, ToolResult):
            return outcome.model_copy(
                update={
                    "structured": result_filter.value(outcome.structured, report),
                    "content": content_blocks(
                        [result_filter.block(b.model_dump(), report) for b in outcome.content]
                    ),
                }
            )
        if isinstance(outcome, ToolError):
            return outcome.model_copy(
                update={
                    "message": result_filter.text(outcome.message, report),
                    "content": content_blocks(
                        [result_filter.block(b.model_dump(), report) for b in outcome.content]
                    ),
                }
            )
        return outcome
