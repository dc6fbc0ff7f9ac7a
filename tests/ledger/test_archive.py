"""Retention (issue 42): ``archive_ledger`` moves a verified prefix of the log to segment files,
``verify(archive=DIR)`` checks segments and database as one chain, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import codemode.ledger._archive as archiving
from codemode.calls import RunBinding, ToolResult
from codemode.errors import LedgerError
from codemode.ledger import Fresh, SqliteLedger, archive_ledger
from codemode.testing import FakeClock
from tests.ledger.conftest import make_intent

DAY = 86_400.0
OpenAt = Callable[..., SqliteLedger]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def location(request: pytest.FixtureRequest, db_path: Path) -> Path | str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return db_path


@pytest.fixture
def store(open_at: OpenAt, location: Path | str) -> SqliteLedger:
    return open_at(path=location)


def settled_run(ledger: SqliteLedger, run_id: str, *, unknown: bool = False) -> None:
    """A finished run with one call: succeeded, or (``unknown``) left with an unknown outcome."""
    ledger.begin_run(RunBinding(run_id=run_id, principal="alice", tenant="acme", trace_id="t"), "sha256:c")
    reserved = ledger.reserve(make_intent(0, key=f"{run_id}-k", call_id=f"{run_id}/0", run_id=run_id))
    assert isinstance(reserved, Fresh)
    ledger.mark_sent(reserved.call_id)
    if unknown:
        ledger.mark_unknown(reserved.call_id, "timed out")
    else:
        ledger.complete(reserved.call_id, ToolResult(structured={"ok": True}))
    ledger.finish_run(run_id, "ok", {"calls": 1})


def old_and_new(ledger: SqliteLedger, clock: FakeClock) -> datetime:
    """One run ten days ago, one now; the cutoff between them."""
    settled_run(ledger, "old-1")
    clock.advance(10 * DAY)
    settled_run(ledger, "new-1")
    return clock.now - timedelta(days=5)


def archive(ledger: SqliteLedger, clock: FakeClock, before: datetime, directory: Path, **options: Any) -> Any:
    return archive_ledger(ledger, before=before, directory=directory, now=clock.now, **options)


def kinds(ledger: SqliteLedger, *, archive_dir: Path | None = None) -> list[tuple[str, str]]:
    return [(p.kind, p.where) for p in ledger.verify(archive=archive_dir).problems]


def test_archived_events_leave_the_database_and_both_verifies_pass(
    store: SqliteLedger, clock: FakeClock, tmp_path: Path
) -> None:
    cutoff = old_and_new(store, clock)
    before = store.verify()
    old_events = [e for e in store.events() if e.at < cutoff]
    result = archive(store, clock, cutoff, tmp_path / "archive")
    assert (result.first_seq, result.last_seq, result.events) == (1, len(old_events), len(old_events))
    assert result.stopped.startswith("events from")
    assert (tmp_path / "archive" / f"{result.segment}").is_file()
    assert store.events()[0].seq == result.last_seq + 1  # the database's log now starts after it

    full = store.verify(archive=tmp_path / "archive")
    assert full.ok, full.problems
    assert (full.archive_checked, full.archived_seq, full.rows_not_rechecked) == (True, result.last_seq, 0)
    assert full.rows_checked == before.rows_checked  # every row re-derived, as before archiving

    plain = store.verify()
    assert plain.ok, plain.problems
    assert (plain.archive_checked, plain.archived_seq, plain.rows_not_rechecked) == (
        False,
        result.last_seq,
        2,
    )

    # The rows stay for queries; the ledger keeps writing, and the chain still links.
    old = store.get_run("old-1")
    assert old is not None and old.status == "ok"
    assert {c.call_id for c in store.list_calls()} == {"old-1/0", "new-1/0"}
    settled_run(store, "later-1")
    assert store.verify(archive=tmp_path / "archive").ok


def test_a_second_archive_continues_the_first_and_a_missing_segment_fails(
    store: SqliteLedger, clock: FakeClock, tmp_path: Path
) -> None:
    folder = tmp_path / "archive"
    settled_run(store, "a")
    clock.advance(5 * DAY)
    settled_run(store, "b")
    clock.advance(5 * DAY)
    settled_run(store, "c")
    first = archive(store, clock, clock.now - timedelta(days=7), folder)
    second = archive(store, clock, clock.now - timedelta(days=2), folder)
    assert second.first_seq == first.last_seq + 1
    assert store.verify(archive=folder).ok

    assert first.segment is not None
    (folder / first.segment).unlink()
    assert ("archive_segment", first.segment) in kinds(store, archive_dir=folder)
    (folder / first.segment.replace(".jsonl", ".manifest.json")).unlink()
    found = kinds(store, archive_dir=folder)
    assert ("archive_segment", f"events 1..{first.last_seq}") in found
    assert store.verify().ok  # the database alone is still whole


def test_a_tampered_segment_fails_even_with_its_digest_recomputed(
    store: SqliteLedger, clock: FakeClock, tmp_path: Path
) -> None:
    folder = tmp_path / "archive"
    result = archive(store, clock, old_and_new(store, clock), folder)
    assert result.segment is not None
    segment = folder / result.segment
    lines = segment.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = lines[1].replace("alice", "mallory")
    segment.write_text("".join(lines), encoding="utf-8")
    assert ("archive_segment", result.segment) in kinds(store, archive_dir=folder)

    manifest_file = folder / result.segment.replace(".jsonl", ".manifest.json")
    manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    manifest["sha256"] = hashlib.sha256(segment.read_bytes()).hexdigest()
    manifest_file.write_text(json.dumps(manifest), encoding="utf-8")
    found = kinds(store, archive_dir=folder)
    assert ("event_edited", "event 2") in found
    assert all(kind != "archive_segment" for kind, _ in found)


def test_open_work_is_not_archived_until_it_settles(
    store: SqliteLedger, clock: FakeClock, tmp_path: Path
) -> None:
    folder = tmp_path / "archive"
    settled_run(store, "old-1", unknown=True)
    clock.advance(10 * DAY)
    settled_run(store, "new-1")
    cutoff = clock.now - timedelta(days=5)
    first_call_event = store.events("old-1/0")[0].seq

    held = archive(store, clock, cutoff, folder)
    assert held.last_seq == first_call_event - 1
    assert "call old-1/0 is still unknown" in held.stopped
    assert store.events("old-1/0")[0].seq == first_call_event  # its whole history is still here

    store.resolve("old-1/0", "failed", "no note in the CRM", resolved_by="test")
    rest = archive(store, clock, cutoff, folder)
    assert rest.first_seq == held.last_seq + 1
    assert rest.stopped.startswith("events from")
    assert store.events("old-1/0") != []  # settled after the cutoff: that event stays
    assert store.verify(archive=folder).ok
    assert store.verify().ok


def test_a_crash_between_writing_and_deleting_is_finished_by_the_next_run(
    store: SqliteLedger, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "archive"
    cutoff = old_and_new(store, clock)
    events_before = len(store.events())

    def killed(*_: object) -> None:
        raise KeyboardInterrupt  # the process dies after the segment is on disk

    with monkeypatch.context() as patch:
        patch.setattr(archiving, "_commit", killed)
        with pytest.raises(KeyboardInterrupt):
            archive(store, clock, cutoff, folder)
    assert len(list(folder.glob("*.manifest.json"))) == 1
    assert len(store.events()) == events_before  # nothing deleted, nothing lost
    assert store.verify(archive=folder).ok  # a segment past the boundary is not read twice

    again = archive(store, clock, cutoff, folder)
    assert again.resumed is not None and again.events == 0
    assert len(list(folder.glob("*.manifest.json"))) == 1
    report = store.verify(archive=folder)
    assert report.ok, report.problems
    assert report.archived_seq > 0


def test_a_dry_run_writes_and_deletes_nothing(store: SqliteLedger, clock: FakeClock, tmp_path: Path) -> None:
    cutoff = old_and_new(store, clock)
    count = len(store.events())
    result = archive(store, clock, cutoff, tmp_path / "archive", dry_run=True)
    assert result.events > 0 and result.segment is None
    assert list((tmp_path / "archive").glob("events-*")) == []
    assert len(store.events()) == count and store.verify().archived_seq == 0


def test_the_newest_event_stays(store: SqliteLedger, clock: FakeClock, tmp_path: Path) -> None:
    settled_run(store, "only")
    head = store.head()
    result = archive(store, clock, clock.now + timedelta(days=1), tmp_path / "archive")
    assert result.last_seq == head[0] - 1
    assert result.stopped == "the newest event stays"
    assert [e.seq for e in store.events()] == [head[0]]
    assert store.verify(archive=tmp_path / "archive").ok


def test_an_archived_anchor_needs_the_archive(store: SqliteLedger, clock: FakeClock, tmp_path: Path) -> None:
    folder = tmp_path / "archive"
    cutoff = old_and_new(store, clock)
    anchor = (2, store.events()[1].hash)
    archive(store, clock, cutoff, folder)
    assert ("anchor_mismatch", "event 2") in [(p.kind, p.where) for p in store.verify(anchor=anchor).problems]
    assert store.verify(anchor=anchor, archive=folder).ok
    rewritten = store.verify(anchor=(2, "0" * 64), archive=folder)
    assert ("anchor_mismatch", "event 2") in [(p.kind, p.where) for p in rewritten.problems]


def test_archive_refuses_a_ledger_that_fails_verify(
    open_at: OpenAt, db_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    ledger = open_at()
    cutoff = old_and_new(ledger, clock)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("UPDATE runs SET status = 'failed' WHERE run_id = 'old-1'")
    conn.close()
    with pytest.raises(LedgerError, match="refusing to archive"):
        archive(ledger, clock, cutoff, tmp_path / "archive")
    assert not list((tmp_path / "archive").glob("events-*"))


def test_sqlite_still_refuses_any_other_delete_of_events(
    open_at: OpenAt, db_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    ledger = open_at()
    archive(ledger, clock, old_and_new(ledger, clock), tmp_path / "archive")
    conn = sqlite3.connect(db_path, isolation_level=None)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM events")
    conn.close()


def test_verify_with_a_missing_archive_directory_fails_only_once_events_are_archived(
    store: SqliteLedger, clock: FakeClock, tmp_path: Path
) -> None:
    cutoff = old_and_new(store, clock)
    assert store.verify(archive=tmp_path / "nowhere").ok  # nothing archived yet: nothing missing
    archive(store, clock, cutoff, tmp_path / "archive")
    found = kinds(store, archive_dir=tmp_path / "nowhere")
    assert ("archive_segment", str(tmp_path / "nowhere")) in found


def test_a_leftover_segment_that_does_not_match_the_database_is_refused(
    store: SqliteLedger, clock: FakeClock, tmp_path: Path
) -> None:
    folder = tmp_path / "archive"
    cutoff = old_and_new(store, clock)
    folder.mkdir()
    stray = folder / "events-000000000001-000000000002.manifest.json"
    stray.write_text(
        json.dumps(
            {
                "format": "codemode-ledger-archive-v1",
                "ledger_id": _ledger_id(store),
                "first_seq": 1,
                "last_seq": 2,
                "prev_hash": "x",
                "last_hash": "not-the-hash",
                "events": 2,
                "sha256": "0" * 64,
                "created_at": "2026-01-01T00:00:00.000000Z",
            }
        ),
        encoding="utf-8",
    )
    with pytest.raises(LedgerError, match="do not match the database"):
        archive(store, clock, cutoff, folder)
    assert store.events()[0].seq == 1  # nothing was deleted


def _ledger_id(store: SqliteLedger) -> str:
    with store.store.transaction(write=False) as tx:
        found = tx.ledger_id()
    assert found is not None
    return found
