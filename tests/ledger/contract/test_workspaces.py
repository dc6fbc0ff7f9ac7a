"""Workspaces' metadata in the ledger, on every store: one row per workspace, read by every client,
committed, used, removed and brought back as events, a removal decided inside its write (so two
pruning replicas remove a workspace once), and every row re-derived exactly by ``verify``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from codemode.ledger import LedgerStateError, StoreLedger, WorkspaceRecord
from tests.ledger.contract.conftest import MakeLedger, OpenClient

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _commit(ledger: StoreLedger, workspace_id: str = "ws-alice", **changes: Any) -> WorkspaceRecord:
    values: dict[str, Any] = {
        "tenant": "acme",
        "principal": "alice",
        "session_id": None,
        "version": "v-1",
        "files": 2,
        "bytes": 10,
        "at": T0,
    }
    values.update(changes)
    return ledger.workspaces.committed(workspace_id, **values)


def test_a_commit_is_read_back_by_another_client(connect: OpenClient, make_ledger: MakeLedger) -> None:
    first, second = make_ledger(connect()), make_ledger(connect())
    made = _commit(first, session_id="ses_1")
    assert (made.version, made.files, made.bytes, made.created_at, made.last_used) == ("v-1", 2, 10, T0, T0)
    assert second.workspaces.find("ws-alice") == made
    assert second.workspaces.listed() == [made]
    assert second.workspaces.listed(tenant="globex") == []
    assert second.workspaces.listed(tenant="acme", principal="bob") == []


def test_commits_uses_and_removals_are_events_and_verify(ledger: StoreLedger) -> None:
    book = ledger.workspaces
    _commit(ledger)
    later = _commit(ledger, version="v-2", files=1, bytes=4, at=T0 + timedelta(seconds=5))
    assert (later.version, later.files, later.created_at) == ("v-2", 1, T0), "a live one keeps its birth"
    assert book.used("ws-alice", T0 + timedelta(seconds=9))
    removed = book.removed("ws-alice", at=T0 + timedelta(seconds=10))
    assert removed is not None and removed.last_used == T0 + timedelta(seconds=9)
    assert book.find("ws-alice") is None and book.listed() == []
    assert book.used("ws-alice", T0 + timedelta(seconds=11)) is False, "a removed one is not used"
    assert book.removed("ws-alice", at=T0 + timedelta(seconds=11)) is None
    back = _commit(ledger, version="v-3", at=T0 + timedelta(seconds=12))
    assert (back.version, back.created_at, back.removed_at) == ("v-3", T0 + timedelta(seconds=12), None)
    kinds = [event.kind for event in ledger.events()]
    assert kinds == [
        "workspace_created",
        "workspace_committed",
        "workspace_used",
        "workspace_removed",
        "workspace_committed",
    ]
    report = ledger.verify()
    assert report.ok, report.problems


def test_listing_is_least_recently_used_first(ledger: StoreLedger) -> None:
    _commit(ledger, "ws-a", at=T0 + timedelta(seconds=30))
    _commit(ledger, "ws-b", principal="bob", at=T0)
    assert [w.workspace_id for w in ledger.workspaces.listed()] == ["ws-b", "ws-a"]
    assert [w.workspace_id for w in ledger.workspaces.listed(principal="alice")] == ["ws-a"]


def test_a_removal_used_since_its_cutoff_is_refused(ledger: StoreLedger) -> None:
    _commit(ledger)
    cutoff = T0 + timedelta(seconds=100)
    ledger.workspaces.used("ws-alice", cutoff)
    assert ledger.workspaces.removed("ws-alice", at=cutoff, unused_before=cutoff) is None
    assert ledger.workspaces.find("ws-alice") is not None
    gone = ledger.workspaces.removed("ws-alice", at=cutoff, unused_before=cutoff + timedelta(microseconds=1))
    assert gone is not None


def test_two_clients_removing_at_once_remove_it_once(connect: OpenClient, make_ledger: MakeLedger) -> None:
    first, second = make_ledger(connect()), make_ledger(connect())
    _commit(first)
    cutoff = T0 + timedelta(days=1)
    results = [
        book.removed("ws-alice", at=cutoff, unused_before=cutoff)
        for book in (first.workspaces, second.workspaces)
    ]
    assert [result is not None for result in results] == [True, False]
    assert [event.kind for event in first.events()].count("workspace_removed") == 1


def test_whose_workspace_it_is_never_changes(ledger: StoreLedger) -> None:
    _commit(ledger)
    with pytest.raises(LedgerStateError, match="whose workspace it is never changes"):
        _commit(ledger, principal="mallory")
    assert ledger.workspaces.find("ws-alice") is not None
    assert len(ledger.events()) == 1


def test_an_edited_row_is_found_by_verify(ledger: StoreLedger) -> None:
    _commit(ledger)
    with ledger.store.transaction(write=True) as tx:  # what someone with write access could do
        tx.update("workspaces", "ws-alice", {"last_used": "2099-01-01T00:00:00.000000Z"})
    where = [(p.kind, p.where) for p in ledger.verify().problems]
    assert where == [("row_edited", "workspaces/ws-alice column last_used")]


def test_the_reducer_refuses_a_change_of_owner_and_a_use_of_a_removed_one(ledger: StoreLedger) -> None:
    from codemode.ledger._reduce import ReduceError, reduce

    _commit(ledger)
    with ledger.store.transaction(write=False) as tx:
        row = tx.row("workspaces", "ws-alice")
    with pytest.raises(ReduceError, match="must not change whose workspace"):
        reduce("workspace_committed", "ws-alice", {"version": "v-2", "principal": "bob"}, row)
    assert row is not None
    removed = {**row, "removed_at": "2026-03-01T12:00:00.000000Z", "version": None}
    with pytest.raises(ReduceError, match="the workspace is removed"):
        reduce("workspace_used", "ws-alice", {"last_used": "2026-03-02T00:00:00.000000Z"}, removed)
