"""Read-only calls, recorded once after they complete instead of before they are sent.

A write is recorded before its request leaves, so that a crash can never hide a side effect.
A read has no side effect to hide: sending it again is harmless, and a crash that loses its
record loses nothing anyone must reconcile. So the broker sends a read at once and hands the
ledger one :class:`ReadRecord` when the answer is in, which is written later, batched with other
records (:mod:`._deferred`), off the path the program waits on.

A read's record is still an event in the hash chain, derived by the same reducer ``verify``
replays. A read that got no usable answer is recorded ``failed`` (never ``unknown``): whether it
ran changes nothing, so there is nothing to reconcile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from codemode.calls import ToolResult
from codemode.catalog import canonical_json
from codemode.ledger._context import LedgerContext, stored_text
from codemode.ledger._models import CallIntent, Completion
from codemode.ledger._reduce import Row
from codemode.ledger._reservations import intent_fields, new_call
from codemode.ledger._stored import stored_outcome
from codemode.ledger._time import later, to_text
from codemode.ledger.stores import StoreTransaction


@dataclass(frozen=True)
class ReadRecord:
    """What the broker knows about one read-only call once it is over."""

    intent: CallIntent
    outcome: Completion | None
    """The answer (or the definite failure); None when the server refused before running it."""
    elapsed_s: float
    """From sending to the answer: ``sent_at`` is the record's time minus this."""
    refused: str | None = None
    """Why the server refused before running it (429/503, unreachable); ``outcome`` is None."""
    retry_after_s: float | None = None
    receipt: str | None = None
    filtered: Mapping[str, int | bool] | None = None
    inputs: Sequence[Mapping[str, Any]] = field(default_factory=lambda: ())
    """How the server's requests for input during the call were answered (``at``: when; the
    call's end if not given)."""
    completed_at: datetime | None = None
    """When the answer came: stamped by the ledger as the record is queued, not when written."""


def read_row(ctx: LedgerContext, tx: StoreTransaction, read: ReadRecord) -> Row:
    """One read's ``call_read`` event, creating its row in its final state, inside ``tx``."""
    now = read.completed_at or ctx.now()
    stamp = to_text(now)
    filtered = None if read.filtered is None else canonical_json(dict(read.filtered)).decode()
    # Answers given during the call are stamped with its end, when not stamped already.
    answers = [{"at": stamp, **a} for a in read.inputs]
    fields: dict[str, Any] = {
        "attempt": 1,
        "owner": ctx.owner,
        "sent_at": to_text(now - timedelta(seconds=max(0.0, read.elapsed_s))),
        "completed_at": stamp,
        "receipt": read.receipt,
        "filter_json": filtered,
        "inputs_json": canonical_json(answers).decode() if answers else None,
    }
    if read.outcome is None:
        fields |= {
            "state": "refused",
            "reason": stored_text(read.refused or "refused before running"),
            "retry_after": None if read.retry_after_s is None else later(now, read.retry_after_s),
        }
    else:
        fields |= stored_outcome(read.outcome, ctx.max_result_bytes)
        fields["state"] = "succeeded" if isinstance(read.outcome, ToolResult) else "failed"
    return new_call(ctx, tx, read.intent.call_id, intent_fields(ctx, read.intent), "call_read", stamp, fields)
