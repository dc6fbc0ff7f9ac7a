"""Every change to the ledger is one event: appended to the hash chain and applied to its row.

:func:`emit` is the only writer of rows. It runs the same reducer ``verify`` replays, so an
illegal change is refused before anything is written, and "the tables are derived from the
events" holds by construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codemode.errors import LedgerError
from codemode.ledger._chain import event_hash, payload_text
from codemode.ledger._context import LedgerContext
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._reduce import EVENT_KINDS, ReduceError, Row, reduce
from codemode.ledger._time import to_text
from codemode.ledger.stores import EventRow, StoreTransaction


def emit(
    ctx: LedgerContext,
    tx: StoreTransaction,
    kind: str,
    subject: str,
    fields: Mapping[str, Any],
    *,
    current: Row | None = None,
    creating: bool = False,
) -> Row:
    """Append one event and apply it to its row; return the new row. Inside a write transaction.

    ``current`` is the subject's row as already read in this transaction, to save reading it
    again; without it the row is looked up, unless ``creating`` says the caller has just seen
    that there is none.
    """
    table = EVENT_KINDS[kind][0] if kind in EVENT_KINDS else "calls"
    if current is None and not creating:
        current = tx.row(table, subject)
    try:
        _, new = reduce(kind, subject, fields, current)
    except ReduceError as exc:
        raise LedgerStateError(f"{subject}: {exc}") from exc
    # The log's end is checked against the head once per transaction: after an append in it, both
    # are that event (a batch of deferred records saves two queries a record).
    last = tx.appended
    if last is None:
        head = tx.head()
        # With every event archived, the log continues from the archive boundary.
        last = tx.last_event() or tx.archived() or (0, ctx.genesis)
        if head != last:
            # Writing now would re-seal a truncated or spliced log under a fresh head.
            raise LedgerError(
                f"ledger {ctx.location}: the log ends at event {last[0]} but its head says "
                f"{'nothing' if head is None else head[0]}: events were removed or added outside "
                "codemode. Refusing to write; run 'codemode ledger verify'."
            )
    seq, at, payload = last[0] + 1, to_text(ctx.now()), payload_text(dict(fields))
    digest = event_hash(last[1], seq=seq, at=at, kind=kind, subject=subject, payload=payload)
    tx.append(
        EventRow(seq=seq, at=at, kind=kind, subject=subject, payload=payload, prev_hash=last[1], hash=digest)
    )
    if current is None:
        tx.insert(table, new)
    else:
        tx.update(table, subject, fields)
    return new
