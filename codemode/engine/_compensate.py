"""Undo the completed side effects of a failed run: its compensation, read from the ledger.

Each completed side-effecting call of the run (a replayed one stands for the call it replayed)
is undone by the call ``[compensation."server/tool"]`` names, newest first. A compensation is a
tool call like any other: a run of its own through the broker and every gate, recorded in the
ledger with ``compensates`` naming the call it undoes, under an idempotency key derived from
that call. So it is never sent twice: a second ``ledger compensate`` finds it done (or in
doubt, after a crash) in the ledger, and the key stops a concurrent one.

Never blind: a call whose own outcome is unknown is listed to reconcile, not undone; a
compensation that failed, or whose outcome is unknown, is listed and not sent again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, field_validator

from codemode._redaction import redact_secrets
from codemode.calls import CallDenied, CallFailed, CallOutcome, ToolError, ToolResult
from codemode.config import CompensationRule, Config
from codemode.errors import LedgerError
from codemode.ledger import CallRecord, Ledger

if TYPE_CHECKING:
    from codemode.broker import Approver


class Compensator(Protocol):
    """What compensating needs of the engine (:class:`codemode.engine.CodeMode` is one)."""

    @property
    def config(self) -> Config: ...
    @property
    def ledger(self) -> Ledger: ...
    def compensation_rules(self) -> Mapping[str, CompensationRule]: ...
    def check_compensations(self) -> None: ...
    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        purpose: str,
        principal: str | None = None,
        tenant: str | None = None,
        approver: Approver | None = None,
        compensates: str | None = None,
    ) -> CallOutcome: ...


EffectStatus = Literal[
    "compensated",
    "compensation failed",
    "compensation in doubt",
    "not compensable",
    "in doubt",
    "would compensate",
]
"""Where one side effect of a run stands:

- ``compensated``: undone (a compensation succeeded);
- ``compensation failed``: its compensation failed or was denied; not retried blindly;
- ``compensation in doubt``: its compensation was sent and never answered: reconcile it;
- ``not compensable``: no compensation is declared, or its arguments cannot be made;
- ``in doubt``: the call's own outcome is unknown: reconcile it before undoing it;
- ``would compensate``: a dry run's plan.
"""

RunVerdict = Literal["succeeded", "failed", "unverified", "partial", "compensated", "compensation failed"]
"""A run's end state: ``succeeded`` (did its task), ``failed`` (no side effect remains),
``unverified`` (its check failed, its effects remain), ``partial`` (side effects remain, the
task is not done), ``compensated`` (every side effect undone), ``compensation failed``."""

_DONE = frozenset({"succeeded", "reconciled_succeeded"})
_IN_DOUBT = frozenset({"unknown", "sent", "reserved"})
_NOTHING_HAPPENED = frozenset({"refused", "abandoned", "reconciled_failed"})
"""A compensation attempt in one of these did nothing: another attempt may run (a new key attempt)."""
_ALL = 1_000_000


class Effect(BaseModel):
    """One side effect of a run and where its undoing stands."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    """``server/tool`` of the call."""
    status: EffectStatus
    undo_tool: str | None = None
    compensation_call: str | None = None
    """The ledger's id of the compensating call (its latest attempt)."""
    detail: str | None = None
    """Why it stands so, or what would be sent; secrets in it (a server's error text, an
    argument) are hidden, as in everything codemode shows."""

    @field_validator("detail")
    @classmethod
    def _without_secrets(cls, value: str | None) -> str | None:
        return None if value is None else redact_secrets(value)[0]


class CompensationReport(BaseModel):
    """What compensating one run did, or (``dry_run``) would do."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    effects: tuple[Effect, ...] = ()
    """Newest first: the order they are undone in."""
    sent: int = 0
    """Compensations sent by this invocation (0 when everything was done before: a no-op)."""
    dry_run: bool = False

    @property
    def outcome(self) -> Literal["compensated", "compensation failed", "partial", "nothing to undo"]:
        statuses = {effect.status for effect in self.effects}
        if not statuses:
            return "nothing to undo"
        if statuses == {"compensated"}:
            return "compensated"
        if "compensation failed" in statuses:
            return "compensation failed"
        return "partial"

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, **self.model_dump(mode="json")}


def run_outcome(status: str, verified: bool | None, report: CompensationReport) -> RunVerdict:
    """A run's end state from its status, its check (None: none) and its compensation report
    (a dry run's when nothing was undone: it still says which side effects remain)."""
    if status == "ok" and verified is not False:
        return "succeeded"
    if report.dry_run or report.outcome == "nothing to undo":
        if status == "ok":
            return "unverified"
        return "failed" if report.outcome == "nothing to undo" else "partial"
    return report.outcome


def recorded_outcome(ledger: Ledger, run_id: str, status: str, verified: bool | None) -> RunVerdict | None:
    """A finished run's end state from the ledger alone (``ledger show``): its side effects and
    their compensations; None while it runs."""
    if status == "running":
        return None
    if status == "ok" and verified is not False:
        return "succeeded"
    undo = undo_standing(ledger, run_id)
    if undo in ("compensated", "compensation failed"):
        return undo
    if status == "ok":
        return "unverified"
    return "failed" if undo == "nothing to undo" else "partial"


def undo_standing(
    ledger: Ledger, run_id: str
) -> Literal["nothing to undo", "compensated", "compensation failed", "remaining"]:
    """Where undoing a run's side effects stands, from the ledger alone: it made none, all are
    undone, a compensation failed, or some remain (not compensated, or in doubt)."""
    effects = side_effects(ledger, run_id, {})
    if not effects:
        return "nothing to undo"
    attempts = _attempts(ledger, effects)
    standing = [_standing(call, attempts.get(call.call_id, [])) for call in effects]
    if any(s is not None and s.status == "compensation failed" for s in standing):
        return "compensation failed"
    if all(s is not None and s.status == "compensated" for s in standing):
        return "compensated"
    return "remaining"


def _attempts(ledger: Ledger, effects: Sequence[CallRecord]) -> dict[str, list[CallRecord]]:
    """The compensation attempts of each effect, oldest first."""
    found: dict[str, list[CallRecord]] = {}
    for attempt in ledger.compensations_of(call.call_id for call in effects):
        assert attempt.compensates is not None
        found.setdefault(attempt.compensates, []).append(attempt)
    return found


def _first_event(ledger: Ledger, call: CallRecord) -> str | None:
    events = ledger.events(call.call_id, limit=1)
    return events[0].kind if events else None


def side_effects(ledger: Ledger, run_id: str, rules: Mapping[str, CompensationRule]) -> list[CallRecord]:
    """The run's calls that may have changed something, oldest first: each call the broker
    reserved (a read is recorded after the fact, never reserved), a replay standing for the
    call it replayed (once). Denied, refused and abandoned calls never ran and are left out."""
    found: dict[str, CallRecord] = {}
    for call in ledger.list_calls(run_id=run_id, limit=_ALL, newest_first=False):
        if call.compensates is not None:
            continue  # a compensation made within the run (there are none today) is not undone
        if call.state == "replayed" and call.replay_of is not None:
            original = ledger.get_call(call.replay_of)
            if original is not None and original.state in _DONE:
                found.setdefault(original.call_id, original)
            continue
        if call.state not in _DONE | _IN_DOUBT:
            continue
        if f"{call.server}/{call.tool}" not in rules and _first_event(ledger, call) == "call_read":
            continue  # a read changes nothing; a configured tool is a write by declaration
        found.setdefault(call.call_id, call)
    return list(found.values())


class _Missing(Exception):
    """An argument source names something the undone call did not have."""


def _dig(value: Any, path: Sequence[str], source: str) -> Any:
    for part in path:
        if not isinstance(value, dict) or part not in value:
            raise _Missing(
                f"{source} is not in the call's {'arguments' if source.startswith('args') else 'result'}"
            )
        value = cast(dict[str, Any], value)[part]
    return value


def undo_arguments(rule: CompensationRule, call: CallRecord) -> dict[str, Any]:
    """The undoing call's arguments, from the undone call's arguments and structured result."""
    outcome = call.outcome()
    structured = outcome.structured if isinstance(outcome, ToolResult) else None
    out: dict[str, Any] = {}
    for name, source in rule.arguments.items():
        origin, *path = source.split(".")
        if origin == "args" and call.arguments is None:
            raise _Missing(
                f"{source}: the ledger did not store the call's arguments ([ledger] store_arguments)"
            )
        out[name] = _dig(call.arguments if origin == "args" else structured, path, source)
    return out


def compensation_key(call_id: str) -> str:
    """The idempotency key of the call that undoes ``call_id``: one per undone call, so a
    second attempt (a resume after a crash, a second ``ledger compensate``) cannot repeat it."""
    return f"compensates:{call_id}"


def _standing(call: CallRecord, attempts: Sequence[CallRecord], *, sending: bool = False) -> Effect | None:
    """Where an effect stands from its earlier compensation attempts; None: it may be sent.

    A denied compensation never reached its server: ``sending`` (a ``ledger compensate`` run,
    once the denial's cause is fixed, say an approval given) may send it; until then it stands
    as failed."""
    label = f"{call.server}/{call.tool}"
    if not attempts:
        return None
    latest = attempts[-1]
    undo = f"{latest.server}/{latest.tool}"
    done = next((a for a in attempts if a.state in _DONE | {"replayed"}), None)
    if done is not None:
        return Effect(
            call_id=call.call_id,
            tool=label,
            status="compensated",
            undo_tool=undo,
            compensation_call=done.call_id,
        )
    if latest.state in _IN_DOUBT:
        why = "its compensation was sent and never answered: settle it with `codemode ledger reconcile`"
        return Effect(
            call_id=call.call_id,
            tool=label,
            status="compensation in doubt",
            undo_tool=undo,
            compensation_call=latest.call_id,
            detail=why,
        )
    if latest.state in _NOTHING_HAPPENED or (sending and latest.state == "denied"):
        return None
    stored = latest.outcome()
    why = _why(stored) if stored is not None else latest.reason or "the compensating call failed"
    if latest.state == "denied":
        why = f"denied by the {latest.gate} gate: {latest.reason}; compensate again once it is allowed"
    return Effect(
        call_id=call.call_id,
        tool=label,
        status="compensation failed",
        undo_tool=undo,
        compensation_call=latest.call_id,
        detail=why,
    )


def _why(outcome: CallOutcome) -> str:
    """Why a compensating call did not succeed, in a line."""
    if isinstance(outcome, CallDenied):
        return f"denied by the {outcome.gate} gate: {outcome.reason}"
    if isinstance(outcome, ToolError):
        return outcome.message
    if isinstance(outcome, CallFailed):
        return outcome.reason
    return "the compensating call answered without an error"


def _after(call: CallRecord, undo: str, outcome: CallOutcome, ledger: Ledger) -> Effect:
    label = f"{call.server}/{call.tool}"
    attempts = ledger.compensations_of([call.call_id])
    latest = attempts[-1].call_id if attempts else None
    if isinstance(outcome, ToolResult):
        return Effect(
            call_id=call.call_id, tool=label, status="compensated", undo_tool=undo, compensation_call=latest
        )
    if isinstance(outcome, CallFailed) and outcome.outcome_unknown:
        status: EffectStatus = "compensation in doubt"
        detail = f"{outcome.reason}; settle it with `codemode ledger reconcile`"
    else:
        status, detail = "compensation failed", _why(outcome)
    return Effect(
        call_id=call.call_id,
        tool=label,
        status=status,
        undo_tool=undo,
        compensation_call=latest,
        detail=detail,
    )


async def compensate_run(
    engine: Compensator, run_id: str, *, dry_run: bool = False, approver: Approver | None = None
) -> CompensationReport:
    """Undo run ``run_id``'s completed side effects, newest first, as the run's principal and
    tenant (see the module docstring). ``dry_run``: say what would be sent, send nothing."""
    ledger = engine.ledger
    run = ledger.get_run(run_id)
    if run is None:
        raise LedgerError(f"no run {run_id!r} in the ledger: see `codemode ledger list --runs`")
    if run.status == "running":
        raise LedgerError(f"run {run_id!r} is still running: compensate it once it has ended")
    rules = engine.compensation_rules()
    if rules:
        engine.check_compensations()
    effects = side_effects(ledger, run_id, rules)
    attempts = _attempts(ledger, effects)
    report: list[Effect] = []
    sent = 0
    for call in reversed(effects):
        label = f"{call.server}/{call.tool}"
        standing = _standing(call, attempts.get(call.call_id, []), sending=not dry_run)
        if standing is not None:
            report.append(standing)
            continue
        if call.state in _IN_DOUBT:
            why = f"its outcome is {call.state}: settle it with `codemode ledger reconcile` before undoing it"
            report.append(Effect(call_id=call.call_id, tool=label, status="in doubt", detail=why))
            continue
        rule = rules.get(label)
        if rule is None:
            why = f'no [compensation."{label}"] is declared'
            report.append(Effect(call_id=call.call_id, tool=label, status="not compensable", detail=why))
            continue
        try:
            arguments = undo_arguments(rule, call)
        except _Missing as exc:
            report.append(
                Effect(
                    call_id=call.call_id,
                    tool=label,
                    status="not compensable",
                    undo_tool=rule.tool,
                    detail=str(exc),
                )
            )
            continue
        if dry_run:
            report.append(
                Effect(
                    call_id=call.call_id,
                    tool=label,
                    status="would compensate",
                    undo_tool=rule.tool,
                    detail=_show(rule.tool, arguments),
                )
            )
            continue
        server, _, tool = rule.tool.partition("/")
        outcome = await engine.call_tool(
            server,
            tool,
            arguments,
            purpose="compensate",
            principal=run.principal,
            tenant=run.tenant,
            approver=approver,
            compensates=call.call_id,
        )
        sent += 1
        report.append(_after(call, rule.tool, outcome, ledger))
    return CompensationReport(run_id=run_id, effects=tuple(report), sent=sent, dry_run=dry_run)


def _show(tool: str, arguments: Mapping[str, Any]) -> str:
    return f"{tool}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
