"""Leases on calls in flight, and recovery from the processes that held them.

A call ``reserved`` or ``sent`` is held by its owner (``host:pid:started:nonce``) until its
lease expires. A lease whose owner is gone (on this host) or whose time ran out is *settled*:
``sent`` becomes ``unknown`` (the server may have executed it: never retried blindly),
``reserved`` becomes ``abandoned`` (never sent: safe to run again). ``reserve``, ``wait_for``
and ``recover`` all settle through :func:`expire`, so every path writes the same thing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from codemode.ledger._context import LedgerContext
from codemode.ledger._errors import LeaseLostError
from codemode.ledger._events import emit
from codemode.ledger._models import RecoveryReport
from codemode.ledger._owner import owner_alive
from codemode.ledger._reduce import Row
from codemode.ledger._states import IN_FLIGHT
from codemode.ledger._time import to_text
from codemode.ledger.stores import CallQuery, RunQuery, StoreTransaction


def unknown_fields(reason: str, stamp: str) -> dict[str, Any]:
    """What a call becoming unknown writes, whether its owner or a lease expiry moves it."""
    return {"state": "unknown", "reason": reason, "lease_expires_at": None, "updated_at": stamp}


def abandoned_fields(reason: str, stamp: str) -> dict[str, Any]:
    """What a call becoming abandoned writes, whether its owner or a lease expiry moves it."""
    return {
        "state": "abandoned",
        "reason": reason,
        "completed_at": stamp,
        "lease_expires_at": None,
        "updated_at": stamp,
    }


def lease_live(ctx: LedgerContext, row: Row, now: datetime) -> bool:
    expires = row["lease_expires_at"]
    if expires is None or str(expires) <= to_text(now):
        return False
    if row["owner"] == ctx.owner:
        # We are running, whatever the process table says; but a call we released is over.
        return str(row["call_id"]) not in ctx.released
    # On this host a vanished owner frees its lease at once instead of at expiry.
    return owner_alive(cast("str | None", row["owner"])) is not False


def expire(ctx: LedgerContext, tx: StoreTransaction, row: Row, now: datetime) -> Row:
    """Settle a call in flight whose owner is gone or whose lease ran out."""
    owner = row["owner"]
    call_id, stamp = str(row["call_id"]), to_text(now)
    gone = owner_alive(cast("str | None", owner)) is False
    why = f"owner {owner} is gone" if gone else f"lease of owner {owner} expired at {row['lease_expires_at']}"
    if owner == ctx.owner and call_id in ctx.released:
        why = "its answer could not be recorded (the ledger was out of reach)"
    if row["state"] == "sent":
        reason = (
            f"sent, but no answer was recorded: {why}. The server may or may not have "
            "executed it; reconcile it, never retry it blindly."
        )
        return emit(ctx, tx, "call_unknown", call_id, unknown_fields(reason, stamp), current=row)
    reason = f"reserved but never sent: {why}"
    return emit(ctx, tx, "call_abandoned", call_id, abandoned_fields(reason, stamp), current=row)


def lease_lost(
    ctx: LedgerContext, tx: StoreTransaction, row: Row, now: datetime, action: str
) -> LeaseLostError | None:
    """Why this ledger may no longer act on a call in flight, or None while it holds the lease.

    An expired lease is settled here (``unknown``/``abandoned``): the caller lets that commit,
    then raises the error.
    """
    if row["owner"] != ctx.owner:
        return LeaseLostError(f"cannot {action} call {row['call_id']}: its lease belongs to {row['owner']}")
    if lease_live(ctx, row, now):
        return None
    expire(ctx, tx, row, now)
    return LeaseLostError(
        f"cannot {action} call {row['call_id']}: its lease expired at {row['lease_expires_at']}"
    )


def recover(ctx: LedgerContext) -> RecoveryReport:
    unknown: list[str] = []
    abandoned: list[str] = []
    interrupted: list[str] = []
    with ctx.write() as tx:
        now = ctx.now()
        for row in tx.calls(CallQuery(states=IN_FLIGHT)):
            if lease_live(ctx, row, now):
                continue
            settled = expire(ctx, tx, row, now)
            (unknown if settled["state"] == "unknown" else abandoned).append(str(row["call_id"]))
        for run in tx.runs(RunQuery(status="running")):
            if owner_alive(cast("str | None", run["owner"])) is False:
                run_id = str(run["run_id"])
                emit(
                    ctx,
                    tx,
                    "run_interrupted",
                    run_id,
                    {"status": "interrupted", "finished_at": to_text(now)},
                    current=run,
                )
                interrupted.append(run_id)
    return RecoveryReport(
        calls_unknown=tuple(unknown), calls_abandoned=tuple(abandoned), runs_interrupted=tuple(interrupted)
    )
