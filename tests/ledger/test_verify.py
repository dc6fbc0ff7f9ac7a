"""verify(): a good ledger passes; any edited, deleted or added record is found and located."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codemode.calls import ToolError, ToolResult
from codemode.errors import LedgerError
from codemode.ledger import ApprovalRecord, CallIntent, Fresh, SqliteLedger, open_ledger
from codemode.ledger._chain import event_hash
from codemode.ledger._schema import CALL_COLUMNS

Intent = Callable[..., CallIntent]


def populate(ledger: SqliteLedger, intent: Intent, binding: Any, clock: Any) -> None:
    from datetime import timedelta

    ledger.begin_run(binding, "sha256:code")
    ok = ledger.reserve(intent(0, key="a"))
    err = ledger.reserve(intent(1, key="b"))
    lost = ledger.reserve(intent(2, key="c"))
    assert isinstance(ok, Fresh)
    assert isinstance(err, Fresh)
    assert isinstance(lost, Fresh)
    for call in (ok, err, lost):
        ledger.mark_sent(call.call_id)
    ledger.complete(ok.call_id, ToolResult(structured={"note_id": 7}), receipt="note-7")
    ledger.complete(err.call_id, ToolError(message="locked"))
    ledger.mark_unknown(lost.call_id, "timed out")
    ledger.reserve(intent(3, key="a"))  # replay
    ledger.mark_denied(intent(4, key=None), gate="consent", reason="no approval")
    ledger.record_approval(
        ApprovalRecord(
            approval_id="ap-1",
            tenant="acme",
            principal="alice",
            server="crm",
            tool="add_note",
            args_digest="sha256:x",
            risk="high",
            approver="terminal",
            issued_at=clock.now,
            expires_at=clock.now + timedelta(minutes=5),
        )
    )
    ledger.finish_run(binding.run_id, "ok", {"calls": 5})


@pytest.fixture
def populated(ledger: SqliteLedger, intent: Intent, binding: Any, clock: Any) -> SqliteLedger:
    populate(ledger, intent, binding, clock)
    return ledger


def tamper(db: Path, *statements: str, params: tuple[Any, ...] = ()) -> None:
    """Edit the file behind the ledger's back, as an attacker with the sqlite3 shell would."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DROP TRIGGER IF EXISTS events_append_only_update")
    conn.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
    for statement in statements:
        conn.execute(statement, params if "?" in statement else ())
    conn.close()


def problems(db: Path) -> list[tuple[str, str]]:
    with open_ledger(db, recover=False) as ledger:
        report = ledger.verify()
    return [(p.kind, p.where) for p in report.problems]


def test_a_good_ledger_verifies(populated: SqliteLedger) -> None:
    report = populated.verify()
    assert report.ok, report.problems
    assert report.events == report.head_seq == len(populated.events())
    assert report.rows_checked == 1 + 5 + 1  # one run, five calls, one approval
    assert (report.head_seq, report.head_hash) == populated.head()


def test_an_empty_ledger_verifies(ledger: SqliteLedger) -> None:
    assert ledger.verify().ok


def test_an_edited_event_is_found(populated: SqliteLedger, db_path: Path) -> None:
    event = next(e for e in populated.events() if e.kind == "call_completed")
    payload = dict(event.payload, receipt="note-8")
    tamper(
        db_path,
        "UPDATE events SET payload = ? WHERE seq = ?",
        params=(json.dumps(payload, sort_keys=True, separators=(",", ":")), event.seq),
    )
    found = problems(db_path)
    assert ("event_edited", f"event {event.seq}") in found
    assert ("row_edited", f"calls/{event.subject} column receipt") in found


def test_an_edited_event_time_or_kind_is_found(populated: SqliteLedger, db_path: Path) -> None:
    tamper(db_path, "UPDATE events SET at = '2020-01-01T00:00:00.000000Z' WHERE seq = 3")
    assert ("event_edited", "event 3") in problems(db_path)


def test_an_event_rehashed_after_editing_breaks_the_link_to_the_next(
    populated: SqliteLedger, db_path: Path
) -> None:
    event = populated.events()[2]
    payload = json.dumps(
        dict(event.payload, args_digest="sha256:forged"), sort_keys=True, separators=(",", ":")
    )
    forged = event_hash(
        event.prev_hash,
        seq=event.seq,
        at=event.at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        kind=event.kind,
        subject=event.subject,
        payload=payload,
    )
    tamper(
        db_path, "UPDATE events SET payload = ?, hash = ? WHERE seq = ?", params=(payload, forged, event.seq)
    )
    found = problems(db_path)
    assert ("chain_broken", f"event {event.seq + 1}") in found
    assert ("event_edited", f"event {event.seq}") not in found


def test_a_deleted_event_is_found(populated: SqliteLedger, db_path: Path) -> None:
    tamper(db_path, "DELETE FROM events WHERE seq = 5")
    found = problems(db_path)
    assert ("event_missing", "event 5") in found


def test_a_deleted_first_event_is_found(populated: SqliteLedger, db_path: Path) -> None:
    tamper(db_path, "DELETE FROM events WHERE seq = 1")
    assert ("event_missing", "event 1") in problems(db_path)


def test_a_truncated_tail_is_found_and_blocks_further_writes(
    populated: SqliteLedger, db_path: Path, intent: Intent
) -> None:
    last = populated.head()[0]
    tamper(db_path, f"DELETE FROM events WHERE seq >= {last - 1}")
    assert ("head_mismatch", "head") in problems(db_path)
    # Appending now would seal the truncation under a new head; the ledger refuses.
    with pytest.raises(LedgerError, match="Refusing to write"):
        populated.reserve(intent(9, key="z"))


def test_an_edited_row_is_found_with_its_column(populated: SqliteLedger, db_path: Path) -> None:
    tamper(db_path, "UPDATE calls SET state = 'succeeded' WHERE call_id = 'run-1/2'")
    assert problems(db_path) == [("row_edited", "calls/run-1/2 column state")]


def test_an_edited_result_is_found(populated: SqliteLedger, db_path: Path) -> None:
    forged = '{"kind":"ok","structured":{"note_id":8}}'
    tamper(db_path, "UPDATE calls SET result_json = ? WHERE call_id = 'run-1/0'", params=(forged,))
    assert problems(db_path) == [("row_edited", "calls/run-1/0 column result_json")]


def test_a_deleted_row_is_found(populated: SqliteLedger, db_path: Path) -> None:
    tamper(db_path, "DELETE FROM calls WHERE call_id = 'run-1/2'")
    assert problems(db_path) == [("row_missing", "calls/run-1/2")]


def test_deleted_runs_and_approvals_are_found(populated: SqliteLedger, db_path: Path) -> None:
    tamper(db_path, "DELETE FROM runs", "UPDATE approvals SET used_at = '2026-01-01T12:00:00.000000Z'")
    found = problems(db_path)
    assert ("row_missing", "runs/run-1") in found
    assert ("row_edited", "approvals/ap-1 column used_at") in found


def test_an_added_row_is_found(populated: SqliteLedger, db_path: Path) -> None:
    copied = {"call_id": "'run-1/99'", "idem_key": "NULL"}  # a copy of run-1/0 under a new id
    names, values = ", ".join(CALL_COLUMNS), ", ".join(copied.get(name, name) for name in CALL_COLUMNS)
    tamper(db_path, f"INSERT INTO calls ({names}) SELECT {values} FROM calls WHERE call_id = 'run-1/0'")
    assert problems(db_path) == [("row_extra", "calls/run-1/99")]


def test_events_resist_casual_edits_with_the_sqlite_shell(populated: SqliteLedger, db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM events WHERE seq = 1")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE events SET kind = 'x' WHERE seq = 1")
    conn.close()


def test_a_consistent_rewrite_of_the_tail_passes_unless_an_anchor_was_kept(
    populated: SqliteLedger, db_path: Path
) -> None:
    """The documented limit: whoever rewrites events, head and tables together is caught only by
    an anchor kept elsewhere."""
    anchor = populated.head()
    last = populated.events()[-1]
    assert last.kind == "run_finished"
    before = populated.events()[-2]
    tamper(
        db_path,
        f"DELETE FROM events WHERE seq = {last.seq}",
        f"UPDATE head SET seq = {before.seq}, hash = '{before.hash}'",
        "UPDATE runs SET status = 'running', summary_json = NULL, finished_at = NULL",
    )
    with open_ledger(db_path, recover=False) as ledger:
        assert ledger.verify().ok
        anchored = ledger.verify(anchor=anchor)
    assert not anchored.ok
    assert [(p.kind, p.where) for p in anchored.problems] == [("anchor_mismatch", f"event {anchor[0]}")]


def test_a_file_with_events_but_no_metadata_is_refused(populated: SqliteLedger, db_path: Path) -> None:
    populated.close()
    tamper(db_path, "DROP TABLE meta")
    with pytest.raises(LedgerError, match="damaged"):
        open_ledger(db_path)


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "codemode.db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(LedgerError):
        open_ledger(bogus)
