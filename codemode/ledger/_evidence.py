"""The evidence chain of a call, assembled from what the ledger stores.

Production acceptance asks, for every action, one chain with no gaps: trace id, principal and
tenant, server and tool version, schema hash, argument digest, approval, external receipt,
result filtering and the final outcome. :func:`run_evidence` reads a run's calls (and the
approvals they used) and gives each link a status:

* ``ok``: recorded, and consistent with the rest of the record;
* ``none``: absent, and nothing in the ledger says it should be there (no approval on a call
  that needed none as far as the ledger knows; no receipt for a call with no sign of a side
  effect);
* ``n/a``: cannot apply (a receipt of a call that was never sent, or of a write to a server
  that gives no receipts);
* ``pending``: the call is still in flight;
* ``missing``: it should be there and is not (for this call, or because the ledger does not
  record it at all yet: the note says which);
* ``unverified``: recorded, but the ledger alone cannot show that it binds this call;
* ``mismatch``: recorded and contradicting the call (another call's approval, another tenant).

The last four are gaps. Only the ledger is read: the policy and pins of today say nothing
certain about a call made under yesterday's, so risk is inferred from what the call recorded
(an approval or an idempotency key are signs of a side effect), never looked up.

Most servers give no receipts at all (MCP has no field for one; :mod:`codemode.broker` finds
one only under a few clearly named keys of a result, or as a task's id). A server gives
receipts, as far as the ledger knows, once any call to it recorded one: a write to such a
server that came back without one is a gap; a write to a server that never gave one is
``n/a``, since nothing says a receipt could be there. The chain is complete when every link
that can exist is there.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from codemode._redaction import redact_secrets
from codemode.ledger._api import Ledger
from codemode.ledger._digest import approval_digest
from codemode.ledger._models import ApprovalRecord, CallRecord, RunRecord

LinkStatus = Literal["ok", "none", "n/a", "pending", "missing", "unverified", "mismatch"]
LinkName = Literal[
    "trace", "identity", "tool", "schema", "arguments", "approval", "receipt", "filtering", "outcome"
]

GAPS: frozenset[str] = frozenset({"missing", "unverified", "mismatch"})
"""The statuses that break the chain."""

LINKS: dict[LinkName, str] = {
    "trace": "request/trace id",
    "identity": "principal and tenant",
    "tool": "server and tool version",
    "schema": "schema hash",
    "arguments": "argument digest",
    "approval": "approval",
    "receipt": "external receipt",
    "filtering": "result filtering",
    "outcome": "final outcome",
}
"""Every link, in chain order, with the label people read."""

_NOT_SENT = frozenset({"denied", "replayed", "refused", "abandoned"})
_SUCCEEDED = frozenset({"succeeded", "reconciled_succeeded"})
_FILTERED_KINDS = frozenset({"ok", "tool_error"})
"""Outcome kinds that carry a server's answer, i.e. that went through the result filter."""


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvidenceLink(_Value):
    name: LinkName
    label: str
    status: LinkStatus
    value: str | None = None
    """What the ledger holds for this link, in one line (None: nothing)."""
    note: str | None = None
    """Why the status is what it is, when it is not plainly ``ok``."""
    record: dict[str, Any] = {}
    """The ledger fields behind the link, as stored (for ``--json``)."""

    @property
    def is_gap(self) -> bool:
        return self.status in GAPS


class EvidenceEvent(_Value):
    seq: int
    at: datetime
    kind: str
    hash: str


class CallEvidence(_Value):
    call_id: str
    server: str
    tool: str
    state: str
    links: tuple[EvidenceLink, ...]
    events: tuple[EvidenceEvent, ...]
    """The hash-chained events that made the record, so a reader can anchor it."""

    @property
    def gaps(self) -> tuple[str, ...]:
        return tuple(link.name for link in self.links if link.is_gap)

    @property
    def complete(self) -> bool:
        return not self.gaps


class RunEvidence(_Value):
    run: RunRecord | None
    """None when only a call was asked for and its run row is gone (never expected)."""
    calls: tuple[CallEvidence, ...]

    @property
    def complete(self) -> bool:
        return all(call.complete for call in self.calls)


def _text(value: str | None) -> str | None:
    """Free text from the ledger as shown: reasons and evidence may quote secrets."""
    return None if value is None else redact_secrets(value)[0]


def _link(
    name: LinkName, status: LinkStatus, value: str | None = None, note: str | None = None, /, **record: Any
) -> EvidenceLink:
    # Positional-only, so that a record field may be called ``value`` or ``note`` too.
    return EvidenceLink(name=name, label=LINKS[name], status=status, value=value, note=note, record=record)


def _trace(call: CallRecord, run: RunRecord | None) -> EvidenceLink:
    if not call.trace_id:
        return _link("trace", "missing", None, "the call has no trace id", trace_id=call.trace_id)
    if run is not None and run.trace_id != call.trace_id:
        return _link(
            "trace",
            "mismatch",
            call.trace_id,
            f"the run's trace id is {run.trace_id}",
            trace_id=call.trace_id,
        )
    # The run's W3C trace id: the caller's trace when its request carried a traceparent.
    note = "the W3C trace id of the run: look it up in your tracing system"
    return _link("trace", "ok", call.trace_id, note, trace_id=call.trace_id)


def _identity(call: CallRecord, run: RunRecord | None) -> EvidenceLink:
    value = f"{call.principal}@{call.tenant}"
    record = {"principal": call.principal, "tenant": call.tenant}
    if not call.principal or not call.tenant:
        return _link("identity", "missing", value, "principal or tenant is empty", **record)
    if run is not None and (run.principal, run.tenant) != (call.principal, call.tenant):
        return _link(
            "identity", "mismatch", value, f"the run acts for {run.principal}@{run.tenant}", **record
        )
    return _link("identity", "ok", value, **record)


def _tool(call: CallRecord) -> EvidenceLink:
    value = f"{call.server}/{call.tool}"
    record = {"server": call.server, "tool": call.tool, "tool_version": call.tool_version}
    if call.tool_version is None:
        return _link(
            "tool",
            "missing",
            value,
            "no version recorded (the server did not report one, or the call predates recording it)",
            **record,
        )
    return _link("tool", "ok", f"{value} version {call.tool_version}", **record)


def _schema(call: CallRecord) -> EvidenceLink:
    if not call.schema_hash:
        return _link(
            "schema",
            "missing",
            None,
            "no schema hash: the call was not made against an approved pin",
            schema_hash=call.schema_hash,
        )
    return _link("schema", "ok", call.schema_hash, schema_hash=call.schema_hash)


def _arguments(call: CallRecord) -> EvidenceLink:
    kept = "the arguments are stored too" if call.arguments is not None else "only the digest is stored"
    value = call.args_digest
    if call.resource_scope:
        value += f" (scope {call.resource_scope})"
    record = {
        "args_digest": call.args_digest,
        "arguments_stored": call.arguments is not None,
        "resource_scope": call.resource_scope,
        "idempotency_key": call.idempotency_key,
    }
    if not call.args_digest:
        return _link("arguments", "missing", None, "no argument digest", **record)
    return _link("arguments", "ok", value, kept, **record)


def _approval_record(approval: ApprovalRecord) -> dict[str, Any]:
    return approval.model_dump(mode="json") | {"note": _text(approval.note)}


def _approval(call: CallRecord, approval: ApprovalRecord | None) -> EvidenceLink:
    if call.approval_id is None:
        if call.state == "denied":
            why = "not given" if call.gate == "consent" else "not reached"
            return _link("approval", "n/a", None, f"{why}: the {call.gate} gate denied the call")
        if call.state == "replayed":
            return _link("approval", "n/a", None, f"a replay is not approved again; see {call.replay_of}")
        # The broker records the approval of every call the consent gate held, so a call sent
        # without one is a call the policy let through (the ledger does not say why: risk).
        return _link("approval", "none", None, "no approval used (the consent gate asked for none)")
    if approval is None:
        return _link(
            "approval",
            "mismatch",
            call.approval_id,
            f"the call names approval {call.approval_id}, which is not in the ledger",
            approval_id=call.approval_id,
        )
    record = _approval_record(approval)
    value = f"{approval.approval_id} by {approval.approver}, risk {approval.risk}"
    expected = (call.tenant, call.principal, call.server, call.tool)
    granted = (approval.tenant, approval.principal, approval.server, approval.tool)
    if granted != expected:
        return _link(
            "approval",
            "mismatch",
            value,
            f"granted for {approval.principal}@{approval.tenant} {approval.server}/{approval.tool}",
            **record,
        )
    if approval.used_by_call != call.call_id:
        used = f"used by {approval.used_by_call}" if approval.used_by_call else "never used"
        return _link("approval", "mismatch", value, f"the approval is {used}, not by this call", **record)
    if approval.args_digest == call.args_digest:  # recorded before approvals named the pin
        return _link("approval", "ok", value, "bound to this call's argument digest", **record)
    if approval.args_digest != approval_digest(call.args_digest, call.schema_hash):
        # The consent gate binds the arguments with the schema's defaults filled in; when the
        # program left a defaulted argument out, the two digests differ legitimately.
        return _link(
            "approval",
            "unverified",
            value,
            f"bound to {approval.args_digest}, not to the call's arguments under its pin "
            "(schema defaults filled in?)",
            **record,
        )
    return _link("approval", "ok", value, "bound to this call's arguments and pinned definition", **record)


def _side_effect_signs(call: CallRecord) -> bool:
    """Whether the record shows the call may have changed something: it was approved or keyed."""
    return call.approval_id is not None or call.idempotency_key is not None


NO_RECEIPTS = "this server gives no receipts (no call to it in this ledger recorded one)"


def _receipt(call: CallRecord, gives_receipts: Callable[[], bool]) -> EvidenceLink:
    """``gives_receipts``: whether the call's server ever gave one (asked only when it matters)."""
    record: dict[str, Any] = {"receipt": call.receipt}
    if call.receipt:
        return _link("receipt", "ok", call.receipt, **record)
    if call.state in _NOT_SENT:
        note = f"replayed from {call.replay_of}" if call.state == "replayed" else "never executed"
        return _link("receipt", "n/a", None, note, **record)
    if call.state in ("reserved", "sent"):
        return _link("receipt", "pending", None, "the call is in flight", **record)
    if call.state == "unknown" or (call.state in _SUCCEEDED and _side_effect_signs(call)):
        record["server_gives_receipts"] = gives = gives_receipts()
        if not gives:
            # Not a gap: an unknown call's gap is its outcome, which says so on its own link.
            return _link("receipt", "n/a", None, NO_RECEIPTS, **record)
        if call.state == "unknown":
            why = "sent without an answer: it may have taken effect"
        else:
            why = "an approved or keyed call succeeded without a receipt, from a server that gives them"
        return _link("receipt", "missing", None, why, **record)
    if call.state in _SUCCEEDED:
        return _link("receipt", "none", None, "no sign of a side effect (no approval, no key)", **record)
    why = "reconciled as not executed" if call.state == "reconciled_failed" else f"the call {call.state}"
    return _link("receipt", "n/a", None, why, **record)


def _filtering(call: CallRecord) -> EvidenceLink:
    record = {
        "result_digest": call.result_digest,
        "result_bytes": call.result_bytes,
        "result_truncated": call.result_truncated,
    }
    if call.state in ("reserved", "sent"):
        return _link("filtering", "pending", None, "the call is in flight", **record)
    if call.state == "replayed":
        return _link("filtering", "n/a", None, f"replayed the stored result of {call.replay_of}", **record)
    if call.state.startswith("reconciled_") or call.outcome_kind not in _FILTERED_KINDS:
        return _link("filtering", "n/a", None, "no result from the server went through the filter", **record)
    stored = "truncated at the ledger's cap" if call.result_truncated else "stored whole"
    value = f"{call.result_digest}, {call.result_bytes} bytes, {stored}"
    report = call.filter_report
    if report is None:  # written before the broker recorded its filter report
        note = "what the result filter changed is not recorded"
        return _link("filtering", "missing", value, note, **record)
    return _link("filtering", "ok", f"{value}; {filter_summary(report)}", filter_report=report, **record)


def filter_summary(report: dict[str, Any]) -> str:
    """What the result filter changed, in one line (``ledger show`` prints it too)."""
    counted = [
        f"{report.get(key, 0)} {label}"
        for key, label in (
            ("secrets_redacted", "secrets redacted"),
            ("pii_tokenized", "PII values tokenised"),
            ("blocks_dropped", "content blocks dropped"),
        )
    ]
    if report.get("truncated"):
        counted.append("truncated to the size limit")
    if report.get("injection_suspected"):
        counted.append("instruction-like text flagged")
    return ", ".join(counted)


def _outcome(call: CallRecord) -> EvidenceLink:
    record: dict[str, Any] = {
        "state": call.state,
        "outcome_kind": call.outcome_kind,
        "gate": call.gate,
        "reason": _text(call.reason),
        "completed_at": call.completed_at,
    }
    reason = record["reason"]
    if call.state in ("reserved", "sent"):
        return _link("outcome", "pending", call.state, "the call is in flight", **record)
    if call.state == "unknown":
        return _link(
            "outcome",
            "missing",
            "unknown",
            f"sent, no answer ({reason}); settle it with 'codemode ledger reconcile {call.call_id}'",
            **record,
        )
    if call.state == "denied":
        return _link("outcome", "ok", f"denied by the {call.gate} gate", reason, **record)
    if call.state == "replayed":
        return _link("outcome", "ok", f"replayed {call.replay_of}", replay_of=call.replay_of, **record)
    if call.state.startswith("reconciled_"):
        record |= {"evidence": _text(call.evidence), "resolved_by": call.resolved_by}
        note = f"by {call.resolved_by}: {_text(call.evidence)}"
        return _link("outcome", "ok", call.state.replace("_", " "), note, **record)
    if call.resolved_by:  # a late answer settled an unknown call
        record["resolved_by"] = call.resolved_by
    return _link("outcome", "ok", call.state, reason, **record)


def call_evidence(
    ledger: Ledger,
    call: CallRecord,
    run: RunRecord | None,
    *,
    gives_receipts: Callable[[str], bool] | None = None,
) -> CallEvidence:
    """The evidence chain of one call, with the approval it names looked up in ``ledger``.
    ``gives_receipts``: ``ledger.gives_receipts``, or a cache of it shared by a run's calls."""
    approval = None if call.approval_id is None else ledger.get_approval(call.approval_id)
    server_gives = gives_receipts or ledger.gives_receipts
    links = (
        _trace(call, run),
        _identity(call, run),
        _tool(call),
        _schema(call),
        _arguments(call),
        _approval(call, approval),
        _receipt(call, lambda: server_gives(call.server)),
        _filtering(call),
        _outcome(call),
    )
    events = tuple(
        EvidenceEvent(seq=e.seq, at=e.at, kind=e.kind, hash=e.hash) for e in ledger.events(call.call_id)
    )
    return CallEvidence(
        call_id=call.call_id, server=call.server, tool=call.tool, state=call.state, links=links, events=events
    )


def run_evidence(ledger: Ledger, run: RunRecord) -> RunEvidence:
    """The chain of every call of ``run``, in the order they were made."""
    # Every call: far more than any run's budget lets it make, so none is left out silently.
    calls = ledger.list_calls(run_id=run.run_id, limit=1_000_000, newest_first=False)
    gives_receipts = cache(ledger.gives_receipts)  # one query per server, not per call
    return RunEvidence(
        run=run,
        calls=tuple(call_evidence(ledger, call, run, gives_receipts=gives_receipts) for call in calls),
    )


def single_call_evidence(ledger: Ledger, call: CallRecord) -> RunEvidence:
    """The chain of one call, with its run (when the ledger has it)."""
    run = ledger.get_run(call.run_id)
    return RunEvidence(run=run, calls=(call_evidence(ledger, call, run),))
