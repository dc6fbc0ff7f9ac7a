"""The values the ledger takes and returns.

States of a call (:mod:`codemode.ledger._states` holds the one table of allowed moves)::

    (new) ─► reserved ─► sent ─► succeeded | failed            the server answered
               │           ├──► refused                         answered "not executed" (429/503)
               │           └──► unknown ─► reconciled_succeeded | reconciled_failed
               │                       └─► succeeded | failed   a late answer arrived after all
               ├──► refused                                     refused before sending
               └──► abandoned                                   never sent (crash, lease lost)
    (new) ─► denied                                             a gate said no; never sent
    (new) ─► replayed                                           answered from an earlier call

Which states hold an idempotency key (block a second execution) and which free it:

- holding: ``reserved``, ``sent`` (in flight), ``unknown`` (must be reconciled first),
  ``succeeded``, ``failed``, ``reconciled_succeeded`` (replayed to later callers);
- freeing: ``refused``, ``abandoned``, ``reconciled_failed`` (nothing happened, a new attempt
  may run), and ``denied``/``replayed`` rows never hold a key at all.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from codemode.calls import CallFailed, CallOutcome, RunBinding, ToolCallRequest, ToolError, ToolResult

# Re-exported here, where the other value types live; the table itself is in _states.
from codemode.ledger._states import CALL_STATES as CALL_STATES
from codemode.ledger._states import IN_FLIGHT as IN_FLIGHT
from codemode.ledger._states import KEY_FREEING as KEY_FREEING
from codemode.ledger._states import KEY_HOLDING as KEY_HOLDING
from codemode.ledger._states import REPLAYABLE as REPLAYABLE
from codemode.ledger._states import CallState as CallState

Resolution = Literal["succeeded", "failed"]
Completion = ToolResult | ToolError | CallFailed
"""What the server answered (or a definite failure after sending): the outcome ``complete`` stores."""

_OUTCOME: TypeAdapter[CallOutcome] = TypeAdapter(CallOutcome)


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CallIntent(_Value):
    """Everything known about a call before it is sent: the first half of the execution record.

    Identity (``principal``, ``tenant``, ``trace_id``) comes from the host's :class:`RunBinding`,
    never from the sandbox. ``idempotency_key`` is the program's own key; the ledger scopes it
    to ``tenant:principal:server:tool:key``.
    """

    call_id: str = Field(min_length=1, max_length=512)
    run_id: str
    trace_id: str
    principal: str
    tenant: str
    server: str
    tool: str
    schema_hash: str
    tool_version: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = None
    resource_scope: str | None = None
    """The concrete resource and action the resource gate granted, e.g. ``write:crm/customer/42``."""
    approval_id: str | None = None
    """The approval consumed for this call (consent proof), if one was needed."""
    skill: str | None = None
    """``name@version`` of the saved skill whose code made the call (as the runtime reported it)."""
    compensates: str | None = None
    """The call this one undoes (a compensation: its run's :attr:`RunBinding.compensates`)."""

    @classmethod
    def from_request(
        cls,
        binding: RunBinding,
        request: ToolCallRequest,
        *,
        resource_scope: str | None = None,
        approval_id: str | None = None,
        tool_version: str | None = None,
    ) -> CallIntent:
        """The intent of one stub call; its call id is ``<run_id>/<seq>``."""
        return cls(
            call_id=f"{binding.run_id}/{request.seq}",
            run_id=binding.run_id,
            trace_id=binding.trace_id,
            principal=binding.principal,
            tenant=binding.tenant,
            server=request.server,
            tool=request.tool,
            schema_hash=request.schema_hash,
            tool_version=tool_version,
            arguments=dict(request.arguments),
            idempotency_key=request.idempotency_key,
            resource_scope=resource_scope,
            approval_id=approval_id,
            skill=request.skill,
        )


class CallRecord(_Value):
    """One row of the ``calls`` table: the execution record of a call."""

    call_id: str
    run_id: str
    attempt: int | None
    """1, 2, … for reserved attempts under one idempotency key (or without a key); None for
    rows that never reserved (denied, replayed)."""
    trace_id: str
    principal: str
    tenant: str
    server: str
    tool: str
    schema_hash: str
    tool_version: str | None
    idempotency_key: str | None
    """The scoped key ``tenant:principal:server:tool:key``."""
    args_digest: str
    arguments: dict[str, Any] | None
    """The canonical arguments, when the ledger stores them (needed for read-back)."""
    resource_scope: str | None
    approval_id: str | None
    state: CallState
    gate: str | None
    reason: str | None
    replay_of: str | None
    owner: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    sent_at: datetime | None
    completed_at: datetime | None
    outcome_kind: str | None
    result: Any
    """The stored outcome as JSON (a dumped :data:`codemode.calls.CallOutcome`), or None."""
    result_digest: str | None
    result_bytes: int | None
    result_truncated: bool
    filter_report: dict[str, Any] | None
    inputs: list[dict[str, Any]]
    """The server's requests for input during the call and how each was answered: who answered,
    when, the action, and a digest of the content (never the content itself)."""
    """What the broker's result filter changed in the answer (counts and flags, never the
    values), as the broker reported it on completion; None when not recorded."""
    receipt: str | None
    retry_after: datetime | None
    evidence: str | None
    resolved_by: str | None
    updated_at: datetime
    skill: str | None = None
    """``name@version`` of the saved skill whose code made the call, as the runtime reported it."""
    compensates: str | None = None
    """The call this one undoes, when it is a compensation."""

    def outcome(self) -> CallOutcome | None:
        """The stored outcome as the value the broker returns to the sandbox."""
        if self.result is None:
            return None
        return _OUTCOME.validate_python(self.result)


class RunRecord(_Value):
    run_id: str
    principal: str
    tenant: str
    trace_id: str
    session_id: str | None
    code_digest: str
    status: str
    """``running`` until finished; then what ``finish_run`` said, or ``interrupted``."""
    summary: dict[str, Any] | None
    owner: str | None
    started_at: datetime
    finished_at: datetime | None


class ApprovalRecord(_Value):
    """A stored approval: bound to a call (or, pre-issued, to a tool) + argument digest + risk + expiry.

    ``call_id`` None means pre-issued: usable by any one call of ``server``/``tool`` in
    ``tenant`` for ``principal`` with exactly these arguments. Single-use either way.
    """

    approval_id: str = Field(min_length=1)
    tenant: str
    principal: str
    server: str
    tool: str
    args_digest: str
    risk: str
    call_id: str | None = None
    approver: str
    issued_at: datetime
    expires_at: datetime
    note: str | None = None
    used_at: datetime | None = None
    used_by_call: str | None = None

    @classmethod
    def issue(
        cls,
        *,
        tenant: str,
        principal: str,
        server: str,
        tool: str,
        args_digest: str,
        risk: str,
        approver: str,
        expires_at: datetime,
        call_id: str | None = None,
        note: str | None = None,
        now: datetime | None = None,
    ) -> ApprovalRecord:
        """A new, unused approval: the one place approval ids and issue times are made."""
        return cls(
            approval_id="appr_" + secrets.token_hex(8),
            tenant=tenant,
            principal=principal,
            server=server,
            tool=tool,
            args_digest=args_digest,
            risk=risk,
            call_id=call_id,
            approver=approver,
            issued_at=now or datetime.now(UTC),
            expires_at=expires_at,
            note=note,
        )


class SessionBinding(_Value):
    """Who opened an MCP session of ``codemode serve``: only callers with the same principal and
    tenant may use it. Keyed by ``session_digest`` (``sha256:<hex>`` of the session id), never by
    the id, which is half of what it takes to use the session."""

    session_digest: str
    principal: str
    tenant: str
    owner: str
    """The ledger owner id (``host:pid:started:nonce``) of the serve process that opened it."""
    bound_at: datetime


class LedgerEvent(_Value):
    seq: int
    at: datetime
    kind: str
    subject: str
    payload: dict[str, Any]
    prev_hash: str
    hash: str


# Results of ``reserve``: a discriminated union on ``kind``.


@dataclass(frozen=True, slots=True)
class Fresh:
    """Go ahead: this call holds the key (if any). Call ``mark_sent`` just before sending."""

    call_id: str
    attempt: int
    sent: bool = False
    """True when ``reserve(send=True)`` already recorded it as sent."""
    kind: Literal["fresh"] = "fresh"


@dataclass(frozen=True, slots=True)
class Replay:
    """The same key and arguments already ran: return ``outcome`` without calling again."""

    call_id: str
    """This call's own row (state ``replayed``)."""
    original_call_id: str
    outcome: CallOutcome
    kind: Literal["replay"] = "replay"


@dataclass(frozen=True, slots=True)
class Conflict:
    """The key was first used with other arguments. Recorded as ``denied``; nothing is sent."""

    call_id: str
    existing_call_id: str
    reason: str
    kind: Literal["conflict"] = "conflict"


@dataclass(frozen=True, slots=True)
class InFlight:
    """Another call with this key is running. Nothing was recorded: wait, then reserve again."""

    call_id: str
    """The running call (not this one)."""
    owner: str | None
    lease_expires_at: datetime | None
    kind: Literal["in_flight"] = "in_flight"


@dataclass(frozen=True, slots=True)
class Unresolved:
    """An earlier call with this key has an unknown outcome: it must be reconciled, not retried."""

    call_id: str
    """This call's own row (state ``denied``, gate ``side_effects``)."""
    unknown_call_id: str
    reason: str
    kind: Literal["unresolved"] = "unresolved"


Reservation = Fresh | Replay | Conflict | InFlight | Unresolved


@dataclass(frozen=True, slots=True)
class ApprovalConsumed:
    approval: ApprovalRecord
    kind: Literal["consumed"] = "consumed"


@dataclass(frozen=True, slots=True)
class ApprovalRefused:
    approval_id: str
    reason: str
    kind: Literal["refused"] = "refused"


ApprovalUse = ApprovalConsumed | ApprovalRefused

ProblemKind = Literal[
    "event_edited",
    "event_missing",
    "chain_broken",
    "invalid_event",
    "row_edited",
    "row_missing",
    "row_extra",
    "head_mismatch",
    "anchor_mismatch",
    "archive_mismatch",
    "archive_segment",
    "database",
]


class VerifyProblem(_Value):
    kind: ProblemKind
    where: str
    """``event 12``, ``calls/run-1/3 column state``, ``head``…"""
    detail: str


class VerifyReport(_Value):
    ok: bool
    events: int
    head_seq: int
    head_hash: str
    rows_checked: int
    problems: tuple[VerifyProblem, ...] = ()
    archived_seq: int = 0
    """Events ``1..archived_seq`` were moved to archive segments (0: none were)."""
    archive_checked: bool = False
    """Whether those segments were read and checked too (``verify --archive``)."""
    rows_not_rechecked: int = 0
    """Rows created by archived events, not re-derived because the archive was not given."""


class RecoveryReport(_Value):
    """What :meth:`SqliteLedger.recover` settled."""

    calls_unknown: tuple[str, ...] = ()
    calls_abandoned: tuple[str, ...] = ()
    runs_interrupted: tuple[str, ...] = ()
