"""Reading calls and events back: the CLI's and the broker's queries."""

from __future__ import annotations

import json

from codemode.errors import LedgerError
from codemode.ledger._context import LedgerContext
from codemode.ledger._models import CallRecord, CallState, LedgerEvent
from codemode.ledger._records import call_record
from codemode.ledger._time import from_text
from codemode.ledger.stores import CallQuery


def get_call(ctx: LedgerContext, call_id: str) -> CallRecord | None:
    with ctx.read() as tx:
        row = tx.row("calls", call_id)
    return None if row is None else call_record(row)


def list_calls(
    ctx: LedgerContext, *, run_id: str | None, state: CallState | None, limit: int, newest_first: bool
) -> list[CallRecord]:
    query = CallQuery(
        run_id=run_id,
        states=None if state is None else frozenset({state}),
        newest_first=newest_first,
        limit=limit,
    )
    with ctx.read() as tx:
        rows = tx.calls(query)
    return [call_record(r) for r in rows]


def find_by_receipt(ctx: LedgerContext, receipt: str) -> list[CallRecord]:
    with ctx.read() as tx:
        rows = tx.calls(CallQuery(receipt=receipt))
    return [call_record(r) for r in rows]


_ANSWERED = frozenset({"succeeded", "failed"})
"""States a server's own answer leaves a call in (a receipt given when reconciling is a person's)."""


def compensations_of(ctx: LedgerContext, call_ids: frozenset[str]) -> list[CallRecord]:
    with ctx.read() as tx:
        rows = tx.calls(CallQuery(compensates=call_ids))
    return [call_record(r) for r in rows]


def gives_receipts(ctx: LedgerContext, server: str) -> bool:
    query = CallQuery(server=server, states=_ANSWERED, with_receipt=True, limit=1)
    with ctx.read() as tx:
        return bool(tx.calls(query))


def unknown_calls(ctx: LedgerContext) -> list[CallRecord]:
    with ctx.read() as tx:
        rows = tx.calls(CallQuery(states=frozenset({"unknown"})))
    return [call_record(r) for r in rows]


def events(ctx: LedgerContext, subject: str | None, limit: int | None) -> list[LedgerEvent]:
    with ctx.read() as tx:
        stored = list(tx.events(subject=subject, limit=limit))
    return [
        LedgerEvent(
            seq=e.seq,
            at=from_text(e.at),
            kind=e.kind,
            subject=e.subject,
            payload=json.loads(e.payload),
            prev_hash=e.prev_hash,
            hash=e.hash,
        )
        for e in stored
    ]


def head(ctx: LedgerContext) -> tuple[int, str]:
    with ctx.read() as tx:
        found = tx.head()
    if found is None:
        raise LedgerError(f"ledger {ctx.location} has no head row: run 'codemode ledger verify'")
    return found
