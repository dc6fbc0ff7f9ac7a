"""Read-only calls, recorded once after they complete instead of before they are sent.

A write is recorded before its request leaves, so that a crash can never hide a side effect.
A read has no side effect to hide: sending it again is harmless, and a crash that loses its
record loses nothing anyone must reconcile. So the broker sends a read at once and hands the
ledger one :class:`ReadRecord` when the answer is in; :class:`DeferredReads` writes those
records in batches, from a thread of its own, off the path the program waits on.

Crash semantics, side by side:

============  ==============================================  ==================================
call          recorded                                        a crash before the record commits
============  ==============================================  ==================================
write         ``reserved``+``sent`` before the request, the   the row says ``sent``: recovery
              outcome after (each commit fsync'd)             makes it ``unknown``, to reconcile
read          one ``call_read`` event after the answer,        no row, no event: the chain and
              batched with other reads (no fsync)             the tables stay consistent, and
                                                              nothing needs reconciling
============  ==============================================  ==================================

A read's record is still an event in the hash chain, derived by the same reducer ``verify``
replays. A read that got no usable answer is recorded ``failed`` (never ``unknown``): whether it
ran changes nothing, so there is nothing to reconcile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from codemode.calls import ToolResult
from codemode.catalog._hashing import canonical_json
from codemode.ledger._context import LedgerContext, stored_text
from codemode.ledger._models import CallIntent, Completion
from codemode.ledger._reservations import intent_fields, new_call
from codemode.ledger._stored import stored_outcome
from codemode.ledger._time import later, to_text

log = logging.getLogger("codemode.ledger")

MAX_BATCH = 256
"""Reads written per transaction at most: large enough to amortise a commit under a fan-out,
small enough that a batch never holds the store's write lock for long."""
LINGER_S = 0.05
"""How long the writer lets reads gather before writing them (unless a batch fills, or someone
waits for them: a query, the end of a run, closing). Waking for every read would put the
writer's work (hashing, encoding, SQL) right beside the event loop that is answering the
program, and in CPython they share one interpreter lock."""


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


def write_reads(ctx: LedgerContext, records: Sequence[ReadRecord]) -> None:
    """Record ``records`` in one transaction: one ``call_read`` event each."""
    with ctx.write(durable=False) as tx:
        for read in records:
            now = read.completed_at or ctx.now()
            stamp = to_text(now)
            filtered = None if read.filtered is None else canonical_json(dict(read.filtered)).decode()
            fields: dict[str, Any] = {
                "attempt": 1,
                "owner": ctx.owner,
                "sent_at": to_text(now - timedelta(seconds=max(0.0, read.elapsed_s))),
                "completed_at": stamp,
                "receipt": read.receipt,
                "filter_json": filtered,
                # Answers given during the call are stamped with its end, when not stamped already.
                "inputs_json": canonical_json([{"at": stamp, **a} for a in read.inputs]).decode()
                if read.inputs
                else None,
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
            base = intent_fields(ctx, read.intent)
            new_call(ctx, tx, read.intent.call_id, base, "call_read", stamp, fields)


class DeferredReads:
    """Read records queued by the broker and written in batches by one daemon thread.

    :meth:`submit` never blocks on the store. :meth:`flush` waits until everything submitted so
    far is written (or dropped: a batch the store refuses is retried one record at a time, and
    a record that still fails is logged and dropped, which for a read loses nothing).
    """

    def __init__(self, write: Callable[[Sequence[ReadRecord]], None], *, linger_s: float = LINGER_S) -> None:
        self._write = write
        self._linger_s = linger_s
        self._queue: deque[ReadRecord] = deque()
        self._changed = threading.Condition()
        self._unwritten = 0
        self._waiting = 0
        """Callers in :meth:`flush`: the writer stops lingering while there are any."""
        self._thread: threading.Thread | None = None
        self._closing = False
        self.dropped = 0
        """Records the store refused even alone (logged); they are lost, harmlessly."""

    @property
    def pending(self) -> int:
        return self._unwritten

    def submit(self, record: ReadRecord) -> None:
        with self._changed:
            if self._closing:
                raise RuntimeError("the ledger is closed")
            self._queue.append(record)
            self._unwritten += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="codemode-ledger-reads", daemon=True)
                self._thread.start()
            if len(self._queue) in (1, MAX_BATCH):  # the writer waits for the first, lingers for a full batch
                self._changed.notify_all()

    def flush(self) -> None:
        with self._changed:
            self._waiting += 1
            self._changed.notify_all()
            try:
                while self._unwritten:
                    self._changed.wait()
            finally:
                self._waiting -= 1

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _loop(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._closing:
                    self._changed.wait()
                deadline = time.monotonic() + self._linger_s
                while len(self._queue) < MAX_BATCH and not self._closing and not self._waiting:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._changed.wait(remaining)
                if not self._queue:
                    return
                batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
            self._write_batch(batch)
            with self._changed:
                self._unwritten -= len(batch)
                self._changed.notify_all()

    def _write_batch(self, batch: list[ReadRecord]) -> None:
        try:
            self._write(batch)
            return
        except Exception:
            if len(batch) == 1:
                self._drop(batch[0])
                return
        for record in batch:  # one bad record must not cost the others their rows
            try:
                self._write([record])
            except Exception:
                self._drop(record)

    def _drop(self, record: ReadRecord) -> None:
        self.dropped += 1
        log.exception(
            "could not record read-only call %s; dropped (a read needs no reconciling)", record.intent.call_id
        )
