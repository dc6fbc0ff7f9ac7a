"""The approval desk: approval requests of serve's runs, held open for an operator to answer.

When the console is on, every run that ``codemode serve`` starts asks its approvals through a
:class:`DeskApprover`. The request goes on the desk (where the console lists it) and, when the
MCP client can answer too, to the client as well: the first answer wins and the other question
is withdrawn. The desk never records anything itself: an answer goes back to the broker's
approval flow, which records and consumes the approval in the ledger exactly as it does for a
terminal or client answer (bound to the call, its argument digest, its risk and its expiry).

The desk's tickets live in the ledger (``StoreLedger.approval_tickets``), so every replica of
``codemode serve`` on one ledger lists them all and any replica's console may answer one: the
answer is written to the ticket (the first answer wins), and the replica whose run asked reads
it back within :data:`POLL_S`. A ticket is not an approval; the asking run's approval flow
still records that, and still checks the answer's expiry itself.

An operator sees and answers only the tickets of the tenants in their :class:`TenantScope`; a
ticket of another tenant is answered exactly like one that is not there.

Every method of :class:`ApprovalDesk` reads or writes the ledger and blocks: call it with
``anyio.to_thread`` from async code (as :class:`DeskApprover` and the console do).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import cast

import anyio

from codemode.broker import ApprovalAnswer, ApprovalRequest, Approver
from codemode.config import Risk
from codemode.ledger import ApprovalTicket, ApprovalTicketBook, TicketClosedError
from codemode.serve.console._scope import TenantScope

POLL_S = 0.25
"""How often a run waiting for an approval reads its ticket for an answer given on any replica."""


class DeskError(Exception):
    """An operator's answer that cannot be taken; the message says why and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Ticket:
    """One approval request on the desk, as the console shows it."""

    request: ApprovalRequest
    opened_at: float
    replica: str
    """The serve replica whose run waits for the answer."""
    answer: ApprovalAnswer | None = None

    @property
    def run_id(self) -> str:
        # The broker names a call "<run id>/<sequence>" (codemode.broker._facts.Call.call_id).
        return self.request.call_id.rsplit("/", 1)[0]


def _moment(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _answer_of(ticket: ApprovalTicket) -> ApprovalAnswer | None:
    if ticket.state != "answered" or ticket.answered_by is None:
        return None
    approved = bool(ticket.approved)
    verdict = "" if approved else f"denied by operator {ticket.answered_by} in the console"
    return ApprovalAnswer(approved, f"console:{ticket.answered_by}", verdict)


def _ticket(held: ApprovalTicket) -> Ticket:
    request = ApprovalRequest(
        call_id=held.call_id,
        principal=held.principal,
        tenant=held.tenant,
        server=held.server,
        tool=held.tool,
        risk=cast("Risk", held.risk),
        why=held.why,
        arguments_summary=held.arguments_summary,
        args_digest=held.args_digest,
        expires_at=held.expires_at.timestamp(),
    )
    return Ticket(request, held.opened_at.timestamp(), held.replica, _answer_of(held))


def _not_pending(call_id: str, why: str = "it was answered, it expired or its run ended") -> DeskError:
    return DeskError(
        404,
        f"no approval is pending for call {call_id}: {why}. Reload the console to see what is pending now.",
    )


def _expired(call_id: str) -> DeskError:
    return DeskError(
        410,
        f"the approval request for call {call_id} has expired, so the call is denied. "
        "The program (or the agent) has to make the call again to ask anew.",
    )


def _closed(call_id: str, ticket: ApprovalTicket | None) -> DeskError:
    """The refusal of an answer to a ticket that is no longer open (the scope already checked)."""
    if ticket is None or ticket.state == "withdrawn":
        return _not_pending(call_id)
    if ticket.state == "answered":
        return _not_pending(call_id, f"it was {ticket.describe()}")
    return _expired(call_id)


class ApprovalDesk:
    """The approval tickets of every replica on the ledger; this replica is ``replica``."""

    def __init__(
        self, tickets: ApprovalTicketBook, *, replica: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._tickets = tickets
        self.replica = replica
        self._clock = clock

    def open(self, request: ApprovalRequest) -> Ticket:
        """Put ``request`` on the desk, held by this replica (a call asks once)."""
        held = self._tickets.opened(
            request.call_id,
            run_id=request.call_id.rsplit("/", 1)[0],
            tenant=request.tenant,
            principal=request.principal,
            server=request.server,
            tool=request.tool,
            risk=request.risk,
            why=request.why,
            arguments_summary=request.arguments_summary,
            args_digest=request.args_digest,
            expires_at=_moment(request.expires_at),
            replica=self.replica,
            at=_moment(self._clock()),
        )
        return _ticket(held)

    def settled(self, call_id: str) -> bool:
        """Whether the ticket of ``call_id`` has left the desk (answered on any replica, or
        closed); :meth:`close` then says what the answer was."""
        held = self._tickets.find(call_id)
        return held is None or held.state != "open"

    def close(self, call_id: str, *, expired: bool) -> ApprovalAnswer | None:
        """Take the ticket of ``call_id`` off the desk: marked expired (nobody answered in time)
        or withdrawn (the client answered, or the run stopped waiting). An operator's answer
        written before that stays, and is returned: the ledger decides which answer came first."""
        at = _moment(self._clock())
        book = self._tickets
        held = book.expired(call_id, at=at) if expired else book.withdrawn(call_id, at=at)
        return None if held is None else _answer_of(held)

    def pending(self, scope: TenantScope) -> list[Ticket]:
        """Open tickets of the tenants in ``scope`` that can still be answered, oldest first."""
        # The ledger lists only the scope's tenants (all of them for ``scope.tenants`` None).
        return [_ticket(t) for t in self._tickets.waiting(at=_moment(self._clock()), tenants=scope.tenants)]

    def answer(
        self, call_id: str, args_digest: str, *, approve: bool, operator: str, scope: TenantScope
    ) -> Ticket:
        """Answer the ticket of ``call_id``, if the operator saw the very arguments it is for.

        ``args_digest`` is the digest the operator's page showed: an answer given on a page
        about other arguments is refused rather than applied to these. Expiry is checked here
        (in the ledger's write, with the first-answer-wins check) only to tell the operator; the
        approval flow and the ledger check it again. A ticket of a tenant outside ``scope`` is
        refused first, as if it were not there (no other check may run first and tell the
        operator it exists).
        """
        held = self._tickets.find(call_id)
        if held is None or not scope.sees(held.tenant):
            raise _not_pending(call_id)
        if held.state != "open":
            raise _closed(call_id, held)
        if held.args_digest != args_digest:
            raise DeskError(
                409,
                f"call {call_id} waits for approval of arguments with digest "
                f"{held.args_digest}, not {args_digest}: your page is out of date. Reload it "
                "and check the arguments again before answering.",
            )
        try:
            done = self._tickets.answered(
                call_id, approve=approve, by=operator, on=self.replica, at=_moment(self._clock())
            )
        except TicketClosedError as exc:  # answered on another replica meanwhile, or expired
            raise _closed(call_id, exc.ticket) from None
        return _ticket(done)


class DeskApprover:
    """Puts each request on the desk and, when there is one, asks ``client`` too; first answer wins."""

    def __init__(self, desk: ApprovalDesk, client: Approver | None) -> None:
        self._desk = desk
        self._client = client

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        desk = self._desk
        await anyio.to_thread.run_sync(desk.open, request)
        from_user: list[ApprovalAnswer] = []
        timed_out = False
        kept: ApprovalAnswer | None = None
        try:
            async with anyio.create_task_group() as tg:

                async def from_console() -> None:
                    # Any replica's console may answer: the answer reaches this run via the ledger.
                    while True:
                        await anyio.sleep(POLL_S)
                        if await anyio.to_thread.run_sync(desk.settled, request.call_id):
                            tg.cancel_scope.cancel()
                            return

                async def from_client(client: Approver) -> None:
                    from_user.append(await client.ask(request))
                    tg.cancel_scope.cancel()

                tg.start_soon(from_console)
                if self._client is not None:
                    tg.start_soon(from_client, self._client)
                # Nobody answering before the request expires is a denial, as everywhere else.
                with anyio.move_on_after(max(0.0, request.expires_at - time.time())):
                    await anyio.sleep_forever()
                timed_out = True
                tg.cancel_scope.cancel()
        finally:
            # Other consoles stop showing it; an operator's answer that came first is kept, and
            # returned: the ticket is where the operator's answer is read, once.
            close = partial(desk.close, request.call_id, expired=timed_out and not from_user)
            with anyio.CancelScope(shield=True):
                kept = await anyio.to_thread.run_sync(close)
        answers = [a for a in (kept, *from_user) if a is not None]
        # The client here and an operator on another replica may answer at once: a "no" from
        # either wins, so a call runs only when nobody who answered refused it. (A client that
        # could not be asked has not refused anything.)
        refusals = [a for a in answers if not a.approved and not a.unreachable]
        if answers:
            return (refusals or answers)[0]
        return ApprovalAnswer(False, "console", "no answer before the approval expired")
