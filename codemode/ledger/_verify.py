"""``verify``: re-check the hash chain and re-derive every table from the events.

What it detects, and how:

* an edited event (any column of it) → its recomputed hash differs from the stored one;
* a deleted event in the middle → a gap in ``seq`` (and the next event links to a hash
  that is no longer there);
* a deleted or edited last event (truncated tail) → the head (last ``seq`` + hash, updated
  in the same transaction as every append) no longer matches the log;
* an edited, deleted or added row in ``runs``/``calls``/``approvals`` → replaying the events
  through the same reducer the writer uses gives other rows;
* an event that could never have been written (illegal state change, bad payload);
* with an anchor (a head recorded elsewhere earlier): any rewrite of history up to it.

After ``codemode ledger archive`` (:mod:`._archive`) the log's prefix ``1..N`` lives in segment
files and the database records ``(N, hash(N))`` as its archive boundary. Then:

* **with the archive** (``archive=`` the segments' events): the segments are replayed from the
  genesis value, must end exactly at the boundary, and the database's events continue them; every
  table is re-derived from all of it. This is the whole check, as before archiving.
* **without it**: the chain is checked from the boundary on (the first remaining event must link
  to it) and the head as usual; rows whose history lies wholly in the database are re-derived
  exactly; rows whose first event was archived are counted in ``rows_not_rechecked`` (their later
  events are hash-checked, not replayed), and an extra row cannot be told from such a row. The
  report says so (``archived_seq``); pass the archive to check everything.

What it cannot detect: a consistent rewrite of the whole file by someone who has this code
and write access (recompute all hashes, the head and the tables). See :mod:`._chain`.

It reads the store only through :class:`.stores.StoreTransaction`, so every store is
checked by the same code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from codemode.ledger._chain import event_hash, genesis_hash
from codemode.ledger._models import VerifyProblem, VerifyReport
from codemode.ledger._reduce import EVENT_KINDS, ReduceError, Row, reduce
from codemode.ledger._schema import COLUMNS, PRIMARY_KEY, Table
from codemode.ledger.stores import EventRow, StoreError, StoreTransaction

_MAX_PROBLEMS = 1000


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Problems:
    def __init__(self) -> None:
        self.items: list[VerifyProblem] = []
        self.dropped = 0

    def add(self, kind: Any, where: str, detail: str) -> None:
        if len(self.items) < _MAX_PROBLEMS:
            self.items.append(VerifyProblem(kind=kind, where=where, detail=detail))
        else:
            self.dropped += 1


@dataclass
class _Replay:
    """The state of a replay: where the chain has got to and the rows derived so far."""

    last_seq: int
    last_hash: str
    partial: bool
    """The log's start is archived and not given: updates of rows created there are not replayed."""
    count: int = 0
    derived: dict[Table, dict[str, Row]] = field(default_factory=lambda: {table: {} for table in COLUMNS})
    not_replayed: dict[Table, set[str]] = field(default_factory=lambda: {table: set() for table in COLUMNS})
    watch_seq: int | None = None
    """An anchored event's seq: its hash is kept in ``watched`` as the replay passes it."""
    watched: str | None = None


def _replay_events(events: Iterable[EventRow], state: _Replay, problems: _Problems) -> None:
    derived = state.derived
    for event in events:
        seq, kind, subject, payload, stored_hash = (
            event.seq,
            event.kind,
            event.subject,
            event.payload,
            event.hash,
        )
        state.count += 1
        where = f"event {seq}"
        last_seq, last_hash = state.last_seq, state.last_hash
        if seq != last_seq + 1:
            missing = f"event {last_seq + 1}" if seq == last_seq + 2 else f"events {last_seq + 1}..{seq - 1}"
            problems.add("event_missing", missing, f"deleted: the log jumps from event {last_seq} to {seq}")
        elif event.prev_hash != last_hash:
            problems.add(
                "chain_broken",
                where,
                "does not link to the event before it (an event was replaced or reordered)",
            )
        try:
            recomputed = event_hash(
                event.prev_hash, seq=int(seq), at=event.at, kind=kind, subject=subject, payload=payload
            )
        except (TypeError, ValueError) as exc:
            recomputed = f"<unhashable: {exc}>"
        if recomputed != stored_hash:
            problems.add("event_edited", where, f"its content does not match its hash ({kind} {subject})")
        state.last_seq, state.last_hash = int(seq), stored_hash
        if seq == state.watch_seq:
            state.watched = stored_hash
        try:
            decoded: object = json.loads(payload)
            if not isinstance(decoded, dict):
                raise ReduceError("the payload is not a JSON object")
            fields = cast("dict[str, Any]", decoded)
            table = EVENT_KINDS[kind][0] if kind in EVENT_KINDS else "calls"
            current = derived[table].get(subject)
            if state.partial and current is None and EVENT_KINDS.get(kind, ("", "create"))[1] == "update":
                state.not_replayed[table].add(subject)  # created in the archived prefix
                continue
            _, row = reduce(kind, subject, fields, current)
            derived[table][subject] = row
        except (ReduceError, ValueError, TypeError) as exc:
            problems.add("invalid_event", where, f"{kind} {subject}: {exc}")


def _compare_tables(tx: StoreTransaction, state: _Replay, problems: _Problems) -> tuple[int, int]:
    """Compare every table with the replay; ``(rows checked, rows not re-checked)``."""
    checked = unchecked = 0
    for table, columns in COLUMNS.items():
        key = PRIMARY_KEY[table]
        actual: dict[str, Row] = {str(row[key]): row for row in tx.rows(table)}
        expected = state.derived[table]
        for pk in sorted(expected.keys() - actual.keys()):
            problems.add("row_missing", f"{table}/{pk}", "the events record it, the table has no such row")
        extra = actual.keys() - expected.keys()
        if state.partial:  # rows created in the archived prefix: not re-derivable without it
            unchecked += len(extra)
        else:
            for pk in sorted(extra):
                problems.add("row_extra", f"{table}/{pk}", "in the table, but no event ever created it")
        for pk in sorted(state.not_replayed[table] - actual.keys()):
            problems.add("row_missing", f"{table}/{pk}", "later events update it, the table has no such row")
        checked += len(actual) - (len(extra) if state.partial else 0)
        for pk in sorted(expected.keys() & actual.keys()):
            for name in columns:
                if actual[pk][name] != expected[pk][name]:
                    problems.add(
                        "row_edited",
                        f"{table}/{pk} column {name}",
                        f"the table has {_short(actual[pk][name])}, "
                        f"the events say {_short(expected[pk][name])}",
                    )
    return checked, unchecked


def verify_store(
    tx: StoreTransaction,
    *,
    anchor: tuple[int, str] | None = None,
    archive: Iterable[EventRow] | None = None,
) -> VerifyReport:
    """Check everything the module docstring lists, inside one read transaction of a store.

    ``archive``: the archived events ``1..N`` in order (:func:`._archive.read_archive`), to check
    the whole chain and every row; without it an archived prefix is taken on trust."""
    problems = _Problems()
    count, rows, unchecked, head_seq, head_hash, boundary = 0, 0, 0, -1, "", None
    try:
        ledger_id = tx.ledger_id()
        if ledger_id is None:
            problems.add("database", "meta", "the ledger id is missing, so the chain cannot be checked")
        genesis = "" if ledger_id is None else genesis_hash(ledger_id)
        for found in tx.integrity_problems():
            problems.add("database", "file", found)
        boundary = tx.archived()
        if boundary is None or archive is not None:
            state = _Replay(0, genesis, partial=False, watch_seq=None if anchor is None else anchor[0])
            if archive is not None:
                _replay_events(archive, state, problems)
                _check_boundary(boundary, (state.last_seq, state.last_hash), problems)
        else:
            state = _Replay(boundary[0], boundary[1], partial=True)
        _replay_events(tx.events(), state, problems)
        count = state.count
        head = tx.head()
        _check_head(head, state.last_seq, state.last_hash, problems)
        head_seq, head_hash = (-1, "") if head is None else head
        if anchor is not None:
            _check_anchor(tx, anchor, boundary, state.watched if archive is not None else None, problems)
        rows, unchecked = _compare_tables(tx, state, problems)
    except StoreError as exc:
        problems.add("database", "file", f"cannot read the ledger: {exc}")
        count, rows, unchecked, head_seq, head_hash = 0, 0, 0, -1, ""
    if problems.dropped:
        problems.items.append(
            VerifyProblem(
                kind="database", where="report", detail=f"{problems.dropped} more problems not listed"
            )
        )
    return VerifyReport(
        ok=not problems.items,
        events=count,
        head_seq=head_seq,
        head_hash=head_hash,
        rows_checked=rows,
        problems=tuple(problems.items),
        archived_seq=0 if boundary is None else boundary[0],
        archive_checked=archive is not None,
        rows_not_rechecked=unchecked,
    )


def _check_boundary(boundary: tuple[int, str] | None, archived: tuple[int, str], problems: _Problems) -> None:
    """The archive given must end exactly where the database says its log was cut."""
    if boundary is None:
        if archived[0] > 0:
            problems.add(
                "archive_mismatch",
                "archive",
                "the database records no archived events, the archive holds some",
            )
    elif archived[0] != boundary[0]:
        problems.add(
            "archive_mismatch",
            "archive",
            f"the archive ends at event {archived[0]}, "
            f"the database says events 1..{boundary[0]} were archived",
        )
    elif archived[1] != boundary[1]:
        problems.add(
            "archive_mismatch",
            "archive",
            f"the archived event {archived[0]} is not the one the database recorded",
        )


def _check_head(head: tuple[int, str] | None, last_seq: int, last_hash: str, problems: _Problems) -> None:
    if head is None:
        problems.add("head_mismatch", "head", "the head row is missing")
        return
    head_seq, head_hash = head
    if head_seq > last_seq:
        problems.add(
            "head_mismatch",
            "head",
            f"truncated: the head says the log ends at event {head_seq}, it ends at {last_seq}",
        )
    elif head_seq < last_seq:
        problems.add(
            "head_mismatch", "head", f"events {head_seq + 1}..{last_seq} were appended outside codemode"
        )
    elif head_hash != last_hash:
        problems.add("head_mismatch", "head", f"the hash of event {last_seq} is not the head's hash")


def _check_anchor(
    tx: StoreTransaction,
    anchor: tuple[int, str],
    boundary: tuple[int, str] | None,
    archived_hash: str | None,
    problems: _Problems,
) -> None:
    """``archived_hash``: the anchored event's hash as the replay of the archive found it."""
    anchor_seq, anchor_hash = anchor
    archived = boundary is not None and anchor_seq <= boundary[0]
    if archived and archived_hash is None:
        problems.add(
            "anchor_mismatch",
            f"event {anchor_seq}",
            "the anchored event is archived: pass the archive (--archive DIR) to check it",
        )
        return
    found = archived_hash if archived else tx.event_hash(anchor_seq)
    if found is None:
        problems.add("anchor_mismatch", f"event {anchor_seq}", "the anchored event is gone")
    elif found != anchor_hash:
        problems.add("anchor_mismatch", f"event {anchor_seq}", "history up to the anchor was rewritten")
