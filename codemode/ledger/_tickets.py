"""Approval tickets: calls waiting for a person's approval, shared by every ``codemode serve``
replica on one ledger, so an operator on any replica's console sees and answers them.

A ticket is opened by the replica whose run asks (``replica``), answered at most once by any
replica (the check and the answer are one write transaction: of two operators answering at once
on two replicas, exactly one wins and the other is told who did), or withdrawn by the asking
replica (its MCP client answered first, or the run ended) or marked expired. A ticket is never
an approval: the asking run's approval flow records the approval in ``approvals`` as it does for
any answer. Every change is an event (``approval_ticket_opened``, ``…_answered``,
``…_withdrawn``, ``…_expired``) whose payload is the columns it writes, so ``verify`` checks the
table like every other.

A replica that dies leaves its tickets open: :meth:`ApprovalTicketBook.waiting` never lists one
past its expiry, and :meth:`ApprovalTicketBook.answered` refuses it (and marks it expired).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, cast

from codemode.ledger._context import LedgerContext
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._events import emit
from codemode.ledger._records import opt_time
from codemode.ledger._reduce import Row
from codemode.ledger._time import from_text, to_text
from codemode.ledger.stores import StoreTransaction

__all__ = ["ApprovalTicket", "ApprovalTicketBook", "TicketClosedError", "TicketState"]

TicketState = Literal["open", "answered", "withdrawn", "expired"]


@dataclass(frozen=True)
class ApprovalTicket:
    """One approval ticket as the ledger holds it."""

    call_id: str
    run_id: str
    tenant: str
    principal: str
    server: str
    tool: str
    risk: str
    why: str
    arguments_summary: str
    args_digest: str
    expires_at: datetime
    replica: str
    """The serve replica whose run waits for the answer."""
    opened_at: datetime
    state: TicketState
    approved: bool | None
    answered_by: str | None
    """The operator who answered (None unless answered)."""
    answered_on: str | None
    """The replica whose console took the answer."""
    closed_at: datetime | None
    """When it was answered, withdrawn or marked expired."""

    def describe(self) -> str:
        """Where the ticket stands, for a person who tried to answer it."""
        when = "" if self.closed_at is None else f" at {to_text(self.closed_at)}"
        if self.state == "answered":
            verdict = "approved" if self.approved else "denied"
            return f"already answered by {self.answered_by} on replica {self.answered_on} ({verdict}){when}"
        if self.state == "withdrawn":
            return f"withdrawn{when}: the MCP client answered first, or the run ended"
        if self.state == "expired":
            return f"expired at {to_text(self.expires_at)}"
        return "open"


class TicketClosedError(LedgerStateError):
    """An answer to a ticket that is not open (or not there); ``ticket`` says where it stands."""

    def __init__(self, call_id: str, ticket: ApprovalTicket | None) -> None:
        self.call_id = call_id
        self.ticket = ticket
        where = "the ledger has no approval ticket for it" if ticket is None else ticket.describe()
        super().__init__(f"call {call_id} cannot be answered: {where}")


def _ticket(row: Row) -> ApprovalTicket:
    approved = row["approved"]
    return ApprovalTicket(
        call_id=str(row["call_id"]),
        run_id=str(row["run_id"]),
        tenant=str(row["tenant"]),
        principal=str(row["principal"]),
        server=str(row["server"]),
        tool=str(row["tool"]),
        risk=str(row["risk"]),
        why=str(row["why"]),
        arguments_summary=str(row["arguments_summary"]),
        args_digest=str(row["args_digest"]),
        expires_at=from_text(str(row["expires_at"])),
        replica=str(row["replica"]),
        opened_at=from_text(str(row["opened_at"])),
        state=cast("TicketState", row["state"]),
        approved=None if approved is None else bool(approved),
        answered_by=cast("str | None", row["answered_by"]),
        answered_on=cast("str | None", row["answered_on"]),
        closed_at=opt_time(row["closed_at"]),
    )


def _waiting(row: Row, at: str) -> bool:
    # Times are fixed-width UTC text: comparing the text compares the moments.
    return row["state"] == "open" and str(row["expires_at"]) > at


class ApprovalTicketBook:
    """The approval tickets of every replica on one ledger. Obtained from
    ``StoreLedger.approval_tickets``; every method blocks (run it with ``anyio.to_thread``)."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    # -- reading ----------------------------------------------------------------------------------

    def find(self, call_id: str) -> ApprovalTicket | None:
        """The ticket of ``call_id`` in whatever state; None when there is none."""
        with self._ctx.read() as tx:
            row = tx.row("approval_tickets", call_id)
        return None if row is None else _ticket(row)

    def waiting(self, *, at: datetime, tenants: Collection[str] | None = None) -> list[ApprovalTicket]:
        """Open tickets (of ``tenants``; None: every tenant) that have not expired ``at``, oldest
        first. Expired ones left open by a replica that died are not listed."""
        now = to_text(at)
        # Every ticket ever opened is a row: a scan keeps the store Protocol unchanged, as for
        # workspaces; a ticket's row is small and the console polls every few seconds at most.
        with self._ctx.read() as tx:
            rows = [
                row
                for row in tx.rows("approval_tickets")
                if _waiting(row, now) and (tenants is None or row["tenant"] in tenants)
            ]
        return sorted((_ticket(r) for r in rows), key=lambda t: (t.opened_at, t.call_id))

    # -- writing ----------------------------------------------------------------------------------

    def opened(
        self,
        call_id: str,
        *,
        run_id: str,
        tenant: str,
        principal: str,
        server: str,
        tool: str,
        risk: str,
        why: str,
        arguments_summary: str,
        args_digest: str,
        expires_at: datetime,
        replica: str,
        at: datetime,
    ) -> ApprovalTicket:
        """Open the ticket of ``call_id`` (a call asks once: a second ticket for it is refused)."""
        fields: dict[str, str | int | None] = {
            "call_id": call_id,
            "run_id": run_id,
            "tenant": tenant,
            "principal": principal,
            "server": server,
            "tool": tool,
            "risk": risk,
            "why": why,
            "arguments_summary": arguments_summary,
            "args_digest": args_digest,
            "expires_at": to_text(expires_at),
            "replica": replica,
            "opened_at": to_text(at),
            "state": "open",
        }
        with self._ctx.write() as tx:
            if tx.row("approval_tickets", call_id) is not None:
                raise LedgerStateError(
                    f"call {call_id} already has an approval ticket: a call asks for approval once"
                )
            new = emit(self._ctx, tx, "approval_ticket_opened", call_id, fields, creating=True)
        return _ticket(new)

    def answered(self, call_id: str, *, approve: bool, by: str, on: str, at: datetime) -> ApprovalTicket:
        """Answer the open ticket of ``call_id`` (``by`` an operator, ``on`` a replica), if it has
        not expired ``at``. The first answer wins: a ticket already answered, withdrawn, expired
        or missing raises :class:`TicketClosedError` saying so (an expired one left open is
        marked expired first)."""
        with self._ctx.write() as tx:
            row = tx.row("approval_tickets", call_id)
            if row is not None and row["state"] == "open":
                when = to_text(at)
                if str(row["expires_at"]) > when:
                    answer: dict[str, str | int | None] = {
                        "state": "answered",
                        "approved": int(approve),
                        "answered_by": by,
                        "answered_on": on,
                        "closed_at": when,
                    }
                    return _ticket(
                        emit(self._ctx, tx, "approval_ticket_answered", call_id, answer, current=row)
                    )
                row = self._close(tx, row, "expired", at)
        raise TicketClosedError(call_id, None if row is None else _ticket(row))

    def withdrawn(self, call_id: str, *, at: datetime) -> ApprovalTicket | None:
        """Withdraw the open ticket of ``call_id`` (its run no longer waits on the console); the
        ticket as it is then (an answer that came first stays), None when there is none."""
        return self._closed(call_id, "withdrawn", at)

    def expired(self, call_id: str, *, at: datetime) -> ApprovalTicket | None:
        """Mark the open ticket of ``call_id`` expired (nobody answered in time); the ticket as it
        is then (an answer that came first stays), None when there is none."""
        return self._closed(call_id, "expired", at)

    def _closed(self, call_id: str, state: TicketState, at: datetime) -> ApprovalTicket | None:
        with self._ctx.write() as tx:
            row = tx.row("approval_tickets", call_id)
            if row is not None and row["state"] == "open":
                row = self._close(tx, row, state, at)
        return None if row is None else _ticket(row)

    def _close(self, tx: StoreTransaction, row: Row, state: TicketState, at: datetime) -> Row:
        fields: dict[str, str | int | None] = {"state": state, "closed_at": to_text(at)}
        return emit(self._ctx, tx, f"approval_ticket_{state}", str(row["call_id"]), fields, current=row)
