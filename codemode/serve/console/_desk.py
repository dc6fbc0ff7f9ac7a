"""The approval desk: approval requests of serve's runs, held open for an operator to answer.

When the console is on, every run that ``codemode serve`` starts asks its approvals through a
:class:`DeskApprover`. The request goes on the desk (where the console lists it) and, when the
MCP client can answer too, to the client as well: the first answer wins and the other question
is withdrawn. The desk never records anything itself: an answer goes back to the broker's
approval flow, which records and consumes the approval in the ledger exactly as it does for a
terminal or client answer (bound to the call, its argument digest, its risk and its expiry).

An operator sees and answers only the tickets of the tenants in their :class:`TenantScope`; a
ticket of another tenant is answered exactly like one that is not there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from codemode.broker import ApprovalAnswer, ApprovalRequest, Approver
from codemode.serve.console._scope import TenantScope


class DeskError(Exception):
    """An operator's answer that cannot be taken; the message says why and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Ticket:
    """One approval request waiting for an answer."""

    request: ApprovalRequest
    opened_at: float = field(default_factory=time.time)
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: ApprovalAnswer | None = None

    @property
    def run_id(self) -> str:
        # The broker names a call "<run id>/<sequence>" (codemode.broker._facts.Call.call_id).
        return self.request.call_id.rsplit("/", 1)[0]


class ApprovalDesk:
    """The open tickets of this server, keyed by call id (a call asks at most once)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._tickets: dict[str, Ticket] = {}
        self._clock = clock

    def open(self, request: ApprovalRequest) -> Ticket:
        ticket = Ticket(request, opened_at=self._clock())
        self._tickets[request.call_id] = ticket
        return ticket

    def close(self, ticket: Ticket) -> None:
        if self._tickets.get(ticket.request.call_id) is ticket:
            del self._tickets[ticket.request.call_id]

    def pending(self, scope: TenantScope) -> list[Ticket]:
        """Open tickets of the tenants in ``scope`` that can still be answered, oldest first."""
        now = self._clock()
        return sorted(
            (
                t
                for t in self._tickets.values()
                if t.request.expires_at > now and scope.sees(t.request.tenant)
            ),
            key=lambda t: t.opened_at,
        )

    def waiting_runs(self, scope: TenantScope) -> set[str]:
        return {ticket.run_id for ticket in self.pending(scope)}

    def answer(
        self, call_id: str, args_digest: str, *, approve: bool, operator: str, scope: TenantScope
    ) -> Ticket:
        """Answer the ticket of ``call_id``, if the operator saw the very arguments it is for.

        ``args_digest`` is the digest the operator's page showed: an answer given on a page
        about other arguments is refused rather than applied to these. Expiry is checked here
        only to tell the operator; the approval flow and the ledger check it again. A ticket of
        a tenant outside ``scope`` is refused first, as if it were not there (no other check may
        run first and tell the operator it exists).
        """
        ticket = self._tickets.get(call_id)
        if ticket is None or ticket.answer is not None or not scope.sees(ticket.request.tenant):
            raise DeskError(
                404,
                f"no approval is pending for call {call_id}: it was answered, it expired or its run "
                "ended. Reload the console to see what is pending now.",
            )
        if ticket.request.args_digest != args_digest:
            raise DeskError(
                409,
                f"call {call_id} waits for approval of arguments with digest "
                f"{ticket.request.args_digest}, not {args_digest}: your page is out of date. Reload it "
                "and check the arguments again before answering.",
            )
        if ticket.request.expires_at <= self._clock():
            raise DeskError(
                410,
                f"the approval request for call {call_id} has expired, so the call is denied. "
                "The program (or the agent) has to make the call again to ask anew.",
            )
        verdict = "" if approve else f"denied by operator {operator} in the console"
        ticket.answer = ApprovalAnswer(approve, f"console:{operator}", verdict)
        ticket.answered.set()
        return ticket


class DeskApprover:
    """Puts each request on the desk and, when there is one, asks ``client`` too; first answer wins."""

    def __init__(self, desk: ApprovalDesk, client: Approver | None) -> None:
        self._desk = desk
        self._client = client

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        ticket = self._desk.open(request)
        answers: list[ApprovalAnswer] = []
        try:
            async with anyio.create_task_group() as tg:

                async def from_console() -> None:
                    await ticket.answered.wait()
                    if ticket.answer is not None:
                        answers.append(ticket.answer)
                    tg.cancel_scope.cancel()

                async def from_client(client: Approver) -> None:
                    answers.append(await client.ask(request))
                    tg.cancel_scope.cancel()

                tg.start_soon(from_console)
                if self._client is not None:
                    tg.start_soon(from_client, self._client)
                # Nobody answering before the request expires is a denial, as everywhere else.
                with anyio.move_on_after(max(0.0, request.expires_at - time.time())):
                    await anyio.sleep_forever()
                tg.cancel_scope.cancel()
        finally:
            self._desk.close(ticket)
        if answers:
            return answers[0]
        return ApprovalAnswer(False, "console", "no answer before the approval expired")
