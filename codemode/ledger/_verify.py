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

What it cannot detect: a consistent rewrite of the whole file by someone who has this code
and write access (recompute all hashes, the head and the tables). See :mod:`._chain`.

It reads the store only through :class:`.stores.StoreTransaction`, so every store is
checked by the same code.
"""

from __future__ import annotations

import json
from typing import Any, cast

from codemode.ledger._chain import event_hash, genesis_hash
from codemode.ledger._models import VerifyProblem, VerifyReport
from codemode.ledger._reduce import EVENT_KINDS, ReduceError, Row, reduce
from codemode.ledger._schema import COLUMNS, PRIMARY_KEY, Table
from codemode.ledger.stores import StoreError, StoreTransaction

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


def _replay_events(
    tx: StoreTransaction, genesis: str, problems: _Problems
) -> tuple[int, int, str, dict[Table, dict[str, Row]]]:
    derived: dict[Table, dict[str, Row]] = {table: {} for table in COLUMNS}
    count, last_seq, last_hash = 0, 0, genesis
    for event in tx.events():
        seq, kind, subject, payload, stored_hash = (
            event.seq,
            event.kind,
            event.subject,
            event.payload,
            event.hash,
        )
        count += 1
        where = f"event {seq}"
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
        last_seq, last_hash = int(seq), stored_hash
        try:
            decoded: object = json.loads(payload)
            if not isinstance(decoded, dict):
                raise ReduceError("the payload is not a JSON object")
            fields = cast("dict[str, Any]", decoded)
            table = EVENT_KINDS[kind][0] if kind in EVENT_KINDS else "calls"
            _, row = reduce(kind, subject, fields, derived[table].get(subject))
            derived[table][subject] = row
        except (ReduceError, ValueError, TypeError) as exc:
            problems.add("invalid_event", where, f"{kind} {subject}: {exc}")
    return count, last_seq, last_hash, derived


def _compare_tables(tx: StoreTransaction, derived: dict[Table, dict[str, Row]], problems: _Problems) -> int:
    checked = 0
    for table, columns in COLUMNS.items():
        key = PRIMARY_KEY[table]
        actual: dict[str, Row] = {str(row[key]): row for row in tx.rows(table)}
        expected = derived[table]
        checked += len(actual)
        for pk in sorted(expected.keys() - actual.keys()):
            problems.add("row_missing", f"{table}/{pk}", "the events record it, the table has no such row")
        for pk in sorted(actual.keys() - expected.keys()):
            problems.add("row_extra", f"{table}/{pk}", "in the table, but no event ever created it")
        for pk in sorted(expected.keys() & actual.keys()):
            for name in columns:
                if actual[pk][name] != expected[pk][name]:
                    problems.add(
                        "row_edited",
                        f"{table}/{pk} column {name}",
                        f"the table has {_short(actual[pk][name])}, "
                        f"the events say {_short(expected[pk][name])}",
                    )
    return checked


def verify_store(tx: StoreTransaction, *, anchor: tuple[int, str] | None = None) -> VerifyReport:
    """Check everything the module docstring lists, inside one read transaction of a store."""
    problems = _Problems()
    count, rows, head_seq, head_hash = 0, 0, -1, ""
    try:
        ledger_id = tx.ledger_id()
        if ledger_id is None:
            problems.add("database", "meta", "the ledger id is missing, so the chain cannot be checked")
        genesis = "" if ledger_id is None else genesis_hash(ledger_id)
        for found in tx.integrity_problems():
            problems.add("database", "file", found)
        count, last_seq, last_hash, derived = _replay_events(tx, genesis, problems)
        head = tx.head()
        _check_head(head, last_seq, last_hash, problems)
        head_seq, head_hash = (-1, "") if head is None else head
        if anchor is not None:
            _check_anchor(tx, anchor, problems)
        rows = _compare_tables(tx, derived, problems)
    except StoreError as exc:
        problems.add("database", "file", f"cannot read the ledger: {exc}")
        count, rows, head_seq, head_hash = 0, 0, -1, ""
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


def _check_anchor(tx: StoreTransaction, anchor: tuple[int, str], problems: _Problems) -> None:
    anchor_seq, anchor_hash = anchor
    found = tx.event_hash(anchor_seq)
    if found is None:
        problems.add("anchor_mismatch", f"event {anchor_seq}", "the anchored event is gone")
    elif found != anchor_hash:
        problems.add("anchor_mismatch", f"event {anchor_seq}", "history up to the anchor was rewritten")
