"""``archive``: move the oldest events of the log to a segment file (:mod:`._archive_files`).

What is moved is always a whole prefix of the chain, ``boundary+1..N``, and only after a
``verify`` of the database passed. Where it stops:

* at the first event at or after ``before``;
* before the first event of any work still open: a ``running`` run, a call not in a final state
  (reserved, sent, unknown…), an unused unexpired approval, a plan that can still be approved or
  used, a proposed skill. Its history stays whole in the database until it settles;
* before the newest event, which stays in the database (the head's own event).

The derived tables keep every row: queries (``ledger list``/``show``) read them, not the events.
Only a call's or run's ``history`` in ``ledger show`` loses the archived events.

Crash safety: the segment is written and fsynced first (outside any write transaction, from one
read snapshot), then one write transaction deletes the events and records the boundary (the
last archived ``seq`` and hash). A crash between the two leaves the events in the database and a
segment starting at ``boundary+1``: the next archive run checks it against the database and
finishes the move, so nothing is lost and nothing is archived twice. One archive directory is
worked on by one process at a time (an ``flock`` on its ``.lock``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from codemode.errors import LedgerError
from codemode.ledger._archive_files import Segment, file_digest, list_segments, write_segment
from codemode.ledger._ledger import StoreLedger
from codemode.ledger._states import CALL_STATES, FINAL
from codemode.ledger._time import to_text
from codemode.ledger.stores import CallQuery, EventRow, RunQuery, StoreTransaction

_OPEN_CALL_STATES = frozenset(CALL_STATES) - FINAL


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    """What one archive run did (or, with ``dry_run``, would do)."""

    directory: str
    before: str
    first_seq: int
    last_seq: int
    """The last event archived now; ``first_seq - 1`` when nothing was."""
    events: int
    last_hash: str
    segment: str | None
    """The events file written (None when nothing was archived, or on a dry run)."""
    stopped: str
    """Why the archived prefix ends where it does."""
    dry_run: bool
    resumed: str | None
    """A segment an interrupted archive had written, whose move this run finished."""


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Generator[None]:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def _first_event(tx: StoreTransaction, subject: str) -> int | None:
    return next((event.seq for event in tx.events(subject=subject, limit=1)), None)


def _open_work(tx: StoreTransaction, now: str) -> list[tuple[str, str]]:
    """``(subject, what is open about it)`` for every piece of work not yet settled."""
    found: list[tuple[str, str]] = [
        (str(run["run_id"]), f"run {run['run_id']} is still running")
        for run in tx.runs(RunQuery(status="running"))
    ]
    found += [
        (str(call["call_id"]), f"call {call['call_id']} is still {call['state']}")
        for call in tx.calls(CallQuery(states=_OPEN_CALL_STATES))
    ]
    found += [
        (str(row["approval_id"]), f"approval {row['approval_id']} is unused and unexpired")
        for row in tx.rows("approvals")
        if row["used_at"] is None and str(row["expires_at"]) > now
    ]
    found += [
        (str(row["plan_id"]), f"plan {row['plan_id']} can still be approved or used")
        for row in tx.rows("plans")
        if row["revoked_at"] is None
        and max(str(row["expires_at"]), str(row["approval_expires_at"] or "")) > now
    ]
    found += [
        (str(row["skill_id"]), f"skill {row['skill_id']} awaits approval")
        for row in tx.rows("skills")
        if row["status"] == "proposed"
    ]
    return found


def _limit(tx: StoreTransaction, now: str) -> tuple[int, str]:
    """The first event that must stay in the database, and why (ignoring the date)."""
    last = tx.last_event()
    limit, why = (0, "the ledger has no events") if last is None else (last[0], "the newest event stays")
    for subject, what in _open_work(tx, now):
        first = _first_event(tx, subject)
        if first is not None and first < limit:
            limit, why = first, f"{what} (its first event is {first})"
    return limit, why


class _Prefix:
    """The events before the limit and the date, counted as they pass."""

    def __init__(self, events: Iterator[EventRow], limit: int, before: str, why: str) -> None:
        self._events, self._limit, self._before = events, limit, before
        self.stopped = why
        self.count, self.first_seq, self.last_seq, self.last_hash = 0, 0, 0, ""

    def __iter__(self) -> Iterator[EventRow]:
        for event in self._events:
            if event.seq >= self._limit:
                return
            if event.at >= self._before:
                self.stopped = f"events from {self._before} on are kept"
                return
            if not self.count:
                self.first_seq = event.seq
            self.count, self.last_seq, self.last_hash = self.count + 1, event.seq, event.hash
            yield event


def _commit(ledger: StoreLedger, segment: Segment, expected: tuple[int, str] | None) -> None:
    """Delete the segment's events from the database, if it still ends where ``expected`` says."""
    with ledger.store.transaction(write=True) as tx:
        boundary = tx.archived()
        if boundary != expected or tx.event_hash(segment.last_seq) != segment.last_hash:
            raise LedgerError(
                f"the ledger changed while {segment.name} was written (another archive of it ran?): "
                "nothing was deleted; run the archive again, which finishes or reports that segment"
            )
        tx.drop_archived((segment.last_seq, segment.last_hash))


def _finish_pending(ledger: StoreLedger, directory: Path, ledger_id: str) -> str | None:
    """Finish the move of a segment an interrupted archive wrote; its name, or None."""
    with ledger.store.transaction(write=False) as tx:
        boundary = tx.archived()
        start = 1 if boundary is None else boundary[0] + 1
        segments, _ = list_segments(directory)
        pending = [s for s in segments if s.first_seq == start and s.ledger_id == ledger_id]
        if not pending:
            return None
        segment = pending[0]
        matches = segment.path.is_file() and tx.event_hash(segment.last_seq) == segment.last_hash
    if not matches or file_digest(segment.path) != segment.sha256:
        raise LedgerError(
            f"{segment.manifest} holds events {segment.first_seq}..{segment.last_seq} that do not match "
            "the database's: move it out of the archive directory and archive again"
        )
    _commit(ledger, segment, boundary)
    return segment.name


def archive_ledger(
    ledger: StoreLedger, *, before: datetime, directory: Path, now: datetime, dry_run: bool = False
) -> ArchiveResult:
    """Move the events before ``before`` (within the limits in the module docstring) to a new
    segment in ``directory``; see the module docstring. Refuses if ``verify`` finds a problem."""
    report = ledger.verify()
    if not report.ok:
        first = report.problems[0]
        raise LedgerError(
            f"refusing to archive: verify finds {len(report.problems)} problem(s), the first "
            f"{first.kind} at {first.where}: {first.detail}. Run 'codemode ledger verify'."
        )
    before_text, now_text, ledger_id = to_text(before), to_text(now), _ledger_id(ledger)
    with _directory_lock(directory):
        resumed = None if dry_run else _finish_pending(ledger, directory, ledger_id)
        with ledger.store.transaction(write=False) as tx:
            boundary = tx.archived()
            limit, why = _limit(tx, now_text)
            prefix = _Prefix(tx.events(), limit, before_text, why)
            segment: Segment | None = None
            if dry_run:
                for _ in prefix:
                    pass
            else:
                segment = write_segment(directory, ledger_id, prefix, now_text)
        if segment is not None:
            # On any failure the segment stays: if the commit did happen (a connection lost
            # while committing), it is part of the archive; if not, the next run finishes it.
            _commit(ledger, segment, boundary)
    start = 1 if boundary is None else boundary[0] + 1
    return ArchiveResult(
        directory=str(directory),
        before=before_text,
        first_seq=prefix.first_seq or start,
        last_seq=prefix.last_seq or start - 1,
        events=prefix.count,
        last_hash=prefix.last_hash,
        segment=None if segment is None else segment.name,
        stopped=prefix.stopped,
        dry_run=dry_run,
        resumed=resumed,
    )


def _ledger_id(ledger: StoreLedger) -> str:
    with ledger.store.transaction(write=False) as tx:
        found = tx.ledger_id()
    if found is None:
        raise LedgerError(f"ledger {ledger.location} has lost its id: it cannot be archived")
    return found
