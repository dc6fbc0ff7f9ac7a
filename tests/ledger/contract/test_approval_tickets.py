"""Approval tickets in the ledger, on every store: opened by the replica whose run asks, listed by
every client until they expire, answered once (the first answer wins, also when two clients race),
withdrawn or marked expired, each move an event that ``verify`` re-derives exactly."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from codemode.ledger import ApprovalTicket, LedgerStateError, StoreLedger, TicketClosedError
from tests.ledger.contract.conftest import MakeLedger, OpenClient

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CALL = "run_00000000000000aa/0"


def _open(ledger: StoreLedger, call_id: str = CALL, **changes: Any) -> ApprovalTicket:
    values: dict[str, Any] = {
        "run_id": call_id.rsplit("/", 1)[0],
        "tenant": "acme",
        "principal": "alice",
        "server": "crm",
        "tool": "add_note",
        "risk": "medium",
        "why": "crm/add_note is medium risk",
        "arguments_summary": '{"text": "hello"}',
        "args_digest": "sha256:" + "ab" * 32,
        "expires_at": T0 + timedelta(minutes=5),
        "replica": "a:8765",
        "at": T0,
    }
    values.update(changes)
    return ledger.approval_tickets.opened(call_id, **values)


def test_a_ticket_opened_by_one_client_is_listed_and_answered_by_another(
    connect: OpenClient, make_ledger: MakeLedger
) -> None:
    asker, other = make_ledger(connect()), make_ledger(connect())
    opened = _open(asker)
    assert (opened.state, opened.replica, opened.approved, opened.closed_at) == ("open", "a:8765", None, None)
    assert other.approval_tickets.waiting(at=T0) == [opened]
    assert other.approval_tickets.waiting(at=T0, tenants={"globex"}) == []
    later = T0 + timedelta(seconds=30)
    answer = other.approval_tickets.answered(CALL, approve=True, by="ops", on="b:8765", at=later)
    assert (answer.state, answer.approved, answer.answered_by, answer.answered_on) == (
        "answered",
        True,
        "ops",
        "b:8765",
    )
    assert answer.closed_at == later
    assert asker.approval_tickets.find(CALL) == answer, "the asker reads the answer back"
    assert asker.approval_tickets.waiting(at=later) == [], "an answered ticket is no longer listed"


def test_a_second_answer_is_refused_and_says_who_answered_first(ledger: StoreLedger) -> None:
    _open(ledger)
    book = ledger.approval_tickets
    book.answered(CALL, approve=False, by="ops", on="b:8765", at=T0)
    with pytest.raises(
        TicketClosedError, match=r"already answered by ops on replica b:8765 \(denied\)"
    ) as info:
        book.answered(CALL, approve=True, by="mallory", on="a:8765", at=T0)
    assert info.value.ticket is not None and info.value.ticket.answered_by == "ops"
    assert book.withdrawn(CALL, at=T0) == book.find(CALL), "withdrawing keeps the answer"
    assert book.find(CALL) is not None and book.find(CALL).approved is False  # type: ignore[union-attr]
    with pytest.raises(TicketClosedError, match="has no approval ticket") as missing:
        book.answered("run_ffffffffffffffff/0", approve=True, by="ops", on="b", at=T0)
    assert missing.value.ticket is None


def test_an_expired_ticket_left_open_is_not_listed_and_not_answerable(ledger: StoreLedger) -> None:
    """What a replica that died leaves behind: open tickets past their expiry."""
    _open(ledger, expires_at=T0 + timedelta(seconds=60))
    book = ledger.approval_tickets
    after = T0 + timedelta(seconds=60)
    assert book.waiting(at=T0) != [] and book.waiting(at=after) == []
    with pytest.raises(TicketClosedError, match="expired at 2026-03-01T12:01:00"):
        book.answered(CALL, approve=True, by="ops", on="b", at=after)
    ticket = book.find(CALL)
    assert ticket is not None and (ticket.state, ticket.approved) == ("expired", None)


def test_withdrawn_and_expired_tickets_end_there_and_everything_verifies(ledger: StoreLedger) -> None:
    book = ledger.approval_tickets
    _open(ledger, "run_1/0")
    _open(ledger, "run_2/0")
    withdrawn = book.withdrawn("run_1/0", at=T0)
    expired = book.expired("run_2/0", at=T0)
    assert withdrawn is not None and withdrawn.state == "withdrawn"
    assert expired is not None and expired.state == "expired"
    assert book.expired("run_1/0", at=T0) == withdrawn, "only an open ticket moves"
    assert book.withdrawn("run_nope/0", at=T0) is None
    with pytest.raises(TicketClosedError, match="withdrawn"):
        book.answered("run_1/0", approve=True, by="ops", on="b", at=T0)
    with pytest.raises(LedgerStateError, match="asks for approval once"):
        _open(ledger, "run_1/0")
    kinds = [event.kind for event in ledger.events()]
    assert kinds == [
        "approval_ticket_opened",
        "approval_ticket_opened",
        "approval_ticket_withdrawn",
        "approval_ticket_expired",
    ]
    report = ledger.verify()
    assert report.ok, report.problems


def test_two_clients_racing_to_answer_one_ticket_one_wins(
    connect: OpenClient, make_ledger: MakeLedger
) -> None:
    replicas = [make_ledger(connect()), make_ledger(connect())]
    _open(replicas[0])
    start = threading.Barrier(2)
    won: list[str] = []
    refused: list[TicketClosedError] = []

    def answer(ledger: StoreLedger, operator: str) -> None:
        start.wait()
        try:
            ledger.approval_tickets.answered(
                CALL, approve=operator == "ops-a", by=operator, on=operator, at=T0
            )
            won.append(operator)
        except TicketClosedError as exc:
            refused.append(exc)

    threads = [
        threading.Thread(target=answer, args=(ledger, name))
        for ledger, name in zip(replicas, ("ops-a", "ops-b"), strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(refused) == 1, (won, refused)
    assert refused[0].ticket is not None and refused[0].ticket.answered_by == won[0]
    assert f"already answered by {won[0]}" in str(refused[0])
    assert [e.kind for e in replicas[1].events()].count("approval_ticket_answered") == 1
    assert replicas[1].verify().ok


def test_the_reducer_refuses_a_second_answer_and_a_changed_request(ledger: StoreLedger) -> None:
    from codemode.ledger._reduce import ReduceError, reduce

    _open(ledger)
    with ledger.store.transaction(write=False) as tx:
        row = tx.row("approval_tickets", CALL)
    assert row is not None
    with pytest.raises(ReduceError, match="may not change"):
        reduce(
            "approval_ticket_withdrawn",
            CALL,
            {"state": "withdrawn", "closed_at": "x", "tenant": "globex"},
            row,
        )
    answered = {**row, "state": "answered", "approved": 1, "answered_by": "ops", "answered_on": "b"}
    fields = {"state": "answered", "approved": 0, "answered_by": "x", "answered_on": "a", "closed_at": "t"}
    with pytest.raises(ReduceError, match="the ticket is answered"):
        reduce("approval_ticket_answered", CALL, fields, answered)
    with pytest.raises(ReduceError, match="approve \\(1\\) or deny \\(0\\)"):
        reduce("approval_ticket_answered", CALL, {**fields, "approved": 2}, row)
