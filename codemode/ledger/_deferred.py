"""Records written after the fact, in batches, by one writer thread off the caller's path.

Two kinds, both committed without an fsync and batched with each other:

* a read-only call's one record (:class:`~codemode.ledger._reads.ReadRecord`);
* with ``[ledger] durability = "write_ahead"``, the outcome of a write whose record before the
  request was already written and flushed (:class:`DeferredCompletion`).

Crash semantics, side by side:

=====================  ====================================  ====================================
call                   recorded                              a crash before the record commits
=====================  ====================================  ====================================
write (``full``)       ``reserved``+``sent`` before the      the row says ``sent``: recovery makes
                       request, the outcome after; each      it ``unknown``, to reconcile; never
                       commit fsync'd and awaited            sent again
write                  the same before the request; the      the same: an answered write may come
(``write_ahead``)      outcome queued here                   back ``unknown``, never sent again
read                   one ``call_read`` event, queued here  no row, no event: nothing to reconcile
=====================  ====================================  ====================================

Either way the chain and the tables stay consistent (a batch is one transaction) and ``verify``
passes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from codemode.calls import CallFailed, ToolError, ToolResult
from codemode.ledger._calls import complete_in
from codemode.ledger._context import LedgerContext
from codemode.ledger._reads import ReadRecord, read_row

log = logging.getLogger("codemode.ledger")

MAX_BATCH = 256
"""Records written per transaction at most: large enough to amortise a commit under a fan-out,
small enough that a batch never holds the store's write lock for long."""
LINGER_S = 0.05
"""How long the writer lets records gather before writing them (unless a batch fills, or someone
waits for them: a query, the end of a run, closing). Waking for every record would put the
writer's work (hashing, encoding, SQL) right beside the event loop that is answering the
program, and in CPython they share one interpreter lock."""


@dataclass(frozen=True)
class DeferredCompletion:
    """A write's outcome, recorded after the program has it (``durability = "write_ahead"``)."""

    call_id: str
    outcome: ToolResult | ToolError | CallFailed
    receipt: str | None
    filtered: Mapping[str, int | bool] | None
    completed_at: datetime | None = None
    """When the answer came: stamped by the ledger as the record is queued."""


Deferred = ReadRecord | DeferredCompletion


def write_deferred(ctx: LedgerContext, records: Sequence[Deferred]) -> None:
    """Record ``records`` in one transaction, in the order they were queued."""
    with ctx.write(durable=False) as tx:
        for record in records:
            if isinstance(record, ReadRecord):
                read_row(ctx, tx, record)
            else:
                complete_in(
                    ctx,
                    tx,
                    record.call_id,
                    record.outcome,
                    receipt=record.receipt,
                    filtered=record.filtered,
                    at=record.completed_at,
                )


class DeferredRecords:
    """Records queued by the broker and written in batches by one daemon thread.

    :meth:`submit` never blocks on the store. :meth:`flush` waits until everything submitted so
    far is written (or dropped: a batch the store refuses is retried one record at a time, and
    a record that still fails is logged and dropped; see the table above for what that costs).
    """

    def __init__(self, write: Callable[[Sequence[Deferred]], None], *, linger_s: float = LINGER_S) -> None:
        self._write = write
        self._linger_s = linger_s
        self._queue: deque[Deferred] = deque()
        self._changed = threading.Condition()
        self._unwritten = 0
        self._waiting = 0
        """Callers in :meth:`flush`: the writer stops lingering while there are any."""
        self._thread: threading.Thread | None = None
        self._closing = False
        self.dropped = 0
        """Records the store refused even alone (logged)."""

    @property
    def pending(self) -> int:
        return self._unwritten

    def submit(self, record: Deferred) -> None:
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

    def _write_batch(self, batch: list[Deferred]) -> None:
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

    def _drop(self, record: Deferred) -> None:
        self.dropped += 1
        call_id = record.intent.call_id if isinstance(record, ReadRecord) else record.call_id
        log.exception(
            "could not record call %s after the fact; dropped (see codemode.ledger._deferred)", call_id
        )
