"""Before a call is sent: record it and decide, atomically, whether it may go.

The decision for a call with an idempotency key reads the key's first and latest attempts and
writes the answer in one write transaction, so across every process sharing the store at most
one call holds a key at a time (the store's unique indexes back this up).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from codemode.ledger._context import LedgerContext, stored_text
from codemode.ledger._digest import arguments_digest, scoped_key
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._events import emit
from codemode.ledger._leases import expire, lease_live
from codemode.ledger._models import (
    CallIntent,
    CallRecord,
    Conflict,
    Fresh,
    InFlight,
    Replay,
    Reservation,
    Unresolved,
)
from codemode.ledger._records import call_record, opt_time
from codemode.ledger._reduce import Row
from codemode.ledger._states import IN_FLIGHT, REPLAYABLE
from codemode.ledger._stored import stored_arguments
from codemode.ledger._time import later, to_text
from codemode.ledger.stores import StoreTransaction


def _scoped(intent: CallIntent) -> str | None:
    """The intent's idempotency key scoped to ``tenant:principal:server:tool:key``, if it has one."""
    if intent.idempotency_key is None:
        return None
    return scoped_key(intent.tenant, intent.principal, intent.server, intent.tool, intent.idempotency_key)


def intent_fields(ctx: LedgerContext, intent: CallIntent) -> dict[str, Any]:
    """The columns a call's row takes from its intent, with the scoped key and the argument
    digest that ``reserve`` decides on. Computed once per call, before the write lock."""
    digest, args_json = stored_arguments(intent.arguments, keep=ctx.store_arguments)
    # Only a compensation carries the link: every other call's event stays as it was.
    link = {} if intent.compensates is None else {"compensates": intent.compensates}
    return {
        **link,
        "run_id": intent.run_id,
        "trace_id": intent.trace_id,
        "principal": intent.principal,
        "tenant": intent.tenant,
        "server": intent.server,
        "tool": intent.tool,
        "schema_hash": intent.schema_hash,
        "tool_version": intent.tool_version,
        "idem_key": _scoped(intent),
        "args_digest": digest,
        "args_json": args_json,
        "resource_scope": intent.resource_scope,
        "approval_id": intent.approval_id,
        "skill": intent.skill,
        "result_truncated": 0,
    }


def _free_call_id(tx: StoreTransaction, call_id: str) -> str:
    # A retried attempt of the same stub call gets "<call_id>#2", "#3", …
    candidate, n = call_id, 1
    while tx.row("calls", candidate) is not None:
        n += 1
        candidate = f"{call_id}#{n}"
    return candidate


def new_call(
    ctx: LedgerContext,
    tx: StoreTransaction,
    call_id: str,
    base: Mapping[str, Any],
    kind: str,
    stamp: str,
    fields: Mapping[str, Any],
) -> Row:
    """Create a call's row under ``call_id`` (or the next free ``call_id#n``)."""
    own_id = _free_call_id(tx, call_id)
    created = {"call_id": own_id, "created_at": stamp, "updated_at": stamp}
    return emit(ctx, tx, kind, own_id, {**base, **created, **fields}, creating=True)


def _create_reserved(
    ctx: LedgerContext,
    tx: StoreTransaction,
    call_id: str,
    base: Mapping[str, Any],
    attempt: int,
    now: datetime,
    lease_s: float,
    send: bool,
) -> Fresh:
    stamp = to_text(now)
    fields = {
        "attempt": attempt,
        "state": "reserved",
        "owner": ctx.owner,
        "lease_expires_at": later(now, lease_s),
    }
    row = new_call(ctx, tx, call_id, base, "call_reserved", stamp, fields)
    own_id = str(row["call_id"])
    if send:
        sent = {"state": "sent", "sent_at": stamp, "updated_at": stamp}
        emit(ctx, tx, "call_sent", own_id, sent, current=row)
    return Fresh(call_id=own_id, attempt=attempt, sent=send)


def _create_denied(
    ctx: LedgerContext,
    tx: StoreTransaction,
    call_id: str,
    base: Mapping[str, Any],
    now: datetime,
    gate: str,
    reason: str,
) -> Row:
    stamp = to_text(now)
    fields = {"state": "denied", "gate": gate, "reason": stored_text(reason), "completed_at": stamp}
    return new_call(ctx, tx, call_id, base, "call_denied", stamp, fields)


def would_replay(ctx: LedgerContext, intent: CallIntent) -> bool:
    key = _scoped(intent)
    if key is None:
        return False
    with ctx.read() as tx:
        first = tx.key_attempt(key, latest=False)
        if first is None or first["args_digest"] != arguments_digest(intent.arguments):
            return False
        latest = tx.key_attempt(key, latest=True)
    return latest is not None and str(latest["state"]) in REPLAYABLE


def reserve(
    ctx: LedgerContext, intent: CallIntent, *, lease_s: float | None, send: bool, durable: bool
) -> Reservation:
    base = intent_fields(ctx, intent)
    key, digest = base["idem_key"], base["args_digest"]
    lease = ctx.lease_s if lease_s is None else lease_s
    with ctx.write(durable=durable) as tx:
        now = ctx.now()
        if key is None:
            return _create_reserved(ctx, tx, intent.call_id, base, 1, now, lease, send)
        first = tx.key_attempt(key, latest=False)
        if first is None:
            return _create_reserved(ctx, tx, intent.call_id, base, 1, now, lease, send)
        if first["args_digest"] != digest:
            reason = (
                f"idempotency key {intent.idempotency_key!r} was first used by call {first['call_id']} "
                "with different arguments; a key names one operation. Use a new key for new arguments."
            )
            own = _create_denied(ctx, tx, intent.call_id, base, now, "side_effects", reason)
            return Conflict(
                call_id=str(own["call_id"]), existing_call_id=str(first["call_id"]), reason=reason
            )
        latest = tx.key_attempt(key, latest=True)
        if latest is None:  # attempt 1 exists, so this cannot happen; refuse rather than guess
            raise LedgerStateError(f"idempotency key {key!r} has a first attempt but no latest one")
        if latest["state"] in IN_FLIGHT:
            if lease_live(ctx, latest, now):
                return InFlight(
                    call_id=str(latest["call_id"]),
                    owner=cast("str | None", latest["owner"]),
                    lease_expires_at=opt_time(latest["lease_expires_at"]),
                )
            latest = expire(ctx, tx, latest, now)
        state = str(latest["state"])
        if state == "unknown":
            reason = (
                f"call {latest['call_id']} with the same idempotency key has an unknown outcome; it is "
                "never retried automatically. Reconcile it: codemode ledger reconcile "
                f"{latest['call_id']} --succeeded|--failed --evidence TEXT"
            )
            own = _create_denied(ctx, tx, intent.call_id, base, now, "side_effects", reason)
            return Unresolved(
                call_id=str(own["call_id"]), unknown_call_id=str(latest["call_id"]), reason=reason
            )
        if state in REPLAYABLE:
            return _replay(ctx, tx, intent, base, latest, now)
        # refused / abandoned / reconciled_failed: nothing happened, a new attempt may run.
        attempt = int(cast(int, latest["attempt"])) + 1
        return _create_reserved(ctx, tx, intent.call_id, base, attempt, now, lease, send)


def _replay(
    ctx: LedgerContext,
    tx: StoreTransaction,
    intent: CallIntent,
    base: Mapping[str, Any],
    latest: Row,
    now: datetime,
) -> Replay:
    original = call_record(latest)
    outcome = original.outcome()
    if outcome is None:  # cannot happen for rows written by this code; refuse, never re-run
        raise LedgerStateError(f"call {original.call_id} is {original.state} but has no stored outcome")
    stamp = to_text(now)
    fields = {
        "state": "replayed",
        "replay_of": original.call_id,
        "outcome_kind": latest["outcome_kind"],
        "result_digest": latest["result_digest"],
        "completed_at": stamp,
    }
    own = new_call(ctx, tx, intent.call_id, base, "call_replayed", stamp, fields)
    return Replay(call_id=str(own["call_id"]), original_call_id=original.call_id, outcome=outcome)


def mark_denied(ctx: LedgerContext, intent: CallIntent, *, gate: str, reason: str) -> CallRecord:
    base = intent_fields(ctx, intent)
    with ctx.write() as tx:
        row = _create_denied(ctx, tx, intent.call_id, base, ctx.now(), gate, reason)
    return call_record(row)
