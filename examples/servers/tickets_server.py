"""``tickets``: an example MCP issue tracker with 300 seeded tickets (TCK-1001 … TCK-1300).

Tickets belong to ``crm`` customers (``customer_id`` such as ``CUST-0042``) and are worked by the
staff who also speak in the ``docs`` transcripts. ``list_tickets`` and ``get_ticket`` declare an
``outputSchema`` (structured results); ``search_tickets`` and ``ticket_stats`` do not (they answer
with JSON text only), so clients see both kinds. ``add_comment``, ``close_ticket`` and
``assign_ticket`` are side effects: each returns a receipt (``trcpt_000001``) and is counted in
``<state dir>/writes.sqlite3`` like the ``crm`` server's writes::

    python tickets_server.py --transport stdio
    python tickets_server.py --transport http --port 8766 --stateless   # 2026-07-28 style, no sessions
    python tickets_server.py count-writes --state-dir DIR

``TICKETS_FAULT`` injects the same faults as ``CRM_FAULT`` (see ``_writes.Faults``).
"""

from __future__ import annotations

import datetime as dt
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import _common
import _world
import _writes
import anyio
from anyio import to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

NAME = "tickets"
STATE_ENV = "TICKETS_STATE_DIR"
FAULT_ENV = "TICKETS_FAULT"
DATASET_START = dt.date(2026, 1, 5)
DATASET_TODAY = "2026-07-01"  # the date written on changes made through the tools (no wall clock)

Status = Literal["open", "in_progress", "closed"]
Priority = Literal["low", "medium", "high", "urgent"]

# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


class Comment(BaseModel):
    comment_id: str
    author: str = Field(description="staff handle, 'customer', or the author given to add_comment")
    body: str
    created: str = Field(description="ISO date")
    receipt_id: str | None = Field(default=None, description="receipt of the add_comment call that made it")


class TicketSummary(BaseModel):
    ticket_id: str = Field(description="TCK-1001 … TCK-1300")
    title: str
    status: Status
    priority: Priority
    labels: list[str]
    assignee: str | None = Field(description="staff handle, or null when unassigned")
    customer_id: str = Field(description="crm customer id, e.g. CUST-0042")
    created: str = Field(description="ISO date")
    comment_count: int


class Ticket(TicketSummary):
    body: str
    resolution: str | None = Field(description="set when the ticket is closed")
    comments: list[Comment]


class TicketPage(BaseModel):
    tickets: list[TicketSummary]
    total: int = Field(description="matching tickets across all pages")
    next_cursor: str | None = Field(description="pass as cursor for the next page; null on the last page")


class TicketReceipt(BaseModel):
    receipt_id: str = Field(description="external receipt id, e.g. trcpt_000012")
    sequence: int
    status: Literal["committed"] = "committed"
    tool: str
    ticket_id: str


class CommentReceipt(TicketReceipt):
    comment_id: str


class CloseReceipt(TicketReceipt):
    previous_status: Status
    resolution: str


class AssignReceipt(TicketReceipt):
    previous_assignee: str | None
    assignee: str


# --------------------------------------------------------------------------------------------
# Seed data
# --------------------------------------------------------------------------------------------

LABELS = (
    "billing", "bug", "feature-request", "onboarding", "integration", "performance",
    "security", "data-export", "sso", "api",
)  # fmt: skip
TITLES = {
    "billing": (
        "Invoice for {month} shows a duplicate charge for {product}",
        "Refund request: {product} cancelled within trial",
        "Tax ID missing on invoices since the {month} renewal",
        "Credit card payment declined although the card is valid",
    ),
    "bug": (
        "{product} dashboard shows blank charts after the {month} release",
        "CSV export drops rows with non-ASCII customer names",
        "Timezone offset wrong on scheduled reports",
        "Saving a filter in {product} throws 'unexpected error'",
    ),
    "feature-request": (
        "Allow bulk editing of tags in {product}",
        "Request: per-team usage breakdown for {product}",
        "Add a dark theme to the admin console",
        "Webhooks for seat changes",
    ),
    "onboarding": (
        "Kick-off call for {product} rollout",
        "Need help importing historical data into {product}",
        "Admin training for new {company} workspace",
    ),
    "integration": (
        "Salesforce sync stopped after password rotation",
        "Slack notifications arrive twice",
        "{product} connector cannot reach our Snowflake warehouse",
    ),
    "performance": (
        "{product} queries time out for accounts with more than 10k rows",
        "API latency above 2s from the APAC region",
        "Slow page loads on the reports tab during business hours",
    ),
    "security": (
        "Please confirm SOC 2 report availability for {month}",
        "Suspicious login attempts on {company} admin account",
        "Request to rotate API keys after staff departure",
    ),
    "data-export": (
        "Full data export for annual audit",
        "Export job stuck at 95% for {product}",
        "GDPR data subject request for a former employee",
    ),
    "sso": (
        "SAML login loop for {company} users",
        "Okta SCIM provisioning creates duplicate users",
        "SSO certificate expires next month, need rotation steps",
    ),
    "api": (
        "HTTP 429 on the Compass API below the documented rate limit",
        "API pagination returns the same page twice",
        "Missing field 'updated_at' in the v2 orders endpoint",
    ),
}
BODY_SENTENCES = (
    "Reported by {contact} at {company} ({customer}).",
    "This affects about {n} users on their side.",
    "It started after our release on {date} according to the customer.",
    "They attached a screenshot and a HAR file to the original email.",
    "Workaround for now: re-run the job manually in the evening.",
    "Customer is on the {segment} plan and renewal is coming up.",
    "We could reproduce it on staging with the customer's settings.",
    "Could not reproduce yet; asked for the exact steps and browser version.",
    "The customer asked for an update by end of week.",
    "Related to the discussion in the weekly support triage.",
)
COMMENTS = (
    "Asked the customer for logs and the exact time it happened.",
    "Reproduced on staging. Handing over to engineering.",
    "Fix is merged and will ship with the next release.",
    "Customer confirmed the workaround works for now.",
    "Escalated to the account manager because of the renewal.",
    "Still waiting on the customer's reply.",
    "Root cause: a cache entry was never invalidated after the settings change.",
    "Shared the knowledge base article with the customer.",
    "Customer says this is blocking their month-end close.",
    "Closed the loop with the customer on a call.",
)
CUSTOMER_COMMENTS = (
    "Any update on this? Our team is still affected.",
    "Thanks, that worked.",
    "We see this again today, same error.",
    "Attaching another example from this morning.",
)
RESOLUTIONS = (
    "Fixed in release 2026.{n}.",
    "Workaround accepted by the customer.",
    "Duplicate of an earlier ticket.",
    "Configuration issue on the customer side; documented the fix.",
    "Refund issued.",
    "Won't fix: works as designed; feature request logged.",
)
WORKERS = tuple(h for h, (_, team) in _world.STAFF.items() if team in ("support", "engineering"))
MONTHS = ("January", "February", "March", "April", "May", "June")


def _seed_tickets() -> dict[str, Ticket]:
    rng = random.Random(f"{_world.SEED}:tickets")
    products = list(_world.PRODUCTS)
    out: dict[str, Ticket] = {}
    for index, cid in enumerate(_world.ticket_customers()):
        tid = _world.ticket_id(_world.FIRST_TICKET + index)
        brief = _world.customer_by_id(cid)
        assert brief is not None
        labels: list[str] = rng.sample(LABELS, rng.choice((1, 1, 2, 2, 3)))
        created = DATASET_START + dt.timedelta(days=index * 175 // _world.TICKET_COUNT + rng.randint(0, 3))
        slots = {
            "month": rng.choice(MONTHS),
            "product": rng.choice(products),
            "company": brief.company,
            "contact": brief.contact_name,
            "customer": cid,
            "segment": brief.segment,
            "n": rng.randint(3, 400),
            "date": (created - dt.timedelta(days=rng.randint(1, 10))).isoformat(),
        }
        title = rng.choice(TITLES[labels[0]]).format(**slots)
        body = " ".join(s.format(**slots) for s in [BODY_SENTENCES[0], *rng.sample(BODY_SENTENCES[1:], 3)])
        status: Status = rng.choices(("open", "in_progress", "closed"), weights=(40, 25, 35))[0]
        # older tickets are more likely to be closed
        if status == "open" and index < 120 and rng.random() < 0.5:
            status = "closed"
        assignee = None if status == "open" and rng.random() < 0.35 else rng.choice(WORKERS)
        comments: list[Comment] = []
        day = created
        for number in range(rng.choice((0, 1, 1, 2, 2, 3, 4, 6))):
            day += dt.timedelta(days=rng.randint(0, 4))
            from_customer = rng.random() < 0.25
            comments.append(
                Comment(
                    comment_id=f"{tid}-c{number + 1}",
                    author="customer" if from_customer else (assignee or rng.choice(WORKERS)),
                    body=rng.choice(CUSTOMER_COMMENTS if from_customer else COMMENTS),
                    created=day.isoformat(),
                )
            )
        out[tid] = Ticket(
            ticket_id=tid,
            title=title,
            status=status,
            priority=rng.choices(("low", "medium", "high", "urgent"), weights=(30, 40, 22, 8))[0],
            labels=labels,
            assignee=assignee,
            customer_id=cid,
            created=created.isoformat(),
            comment_count=len(comments),
            body=body,
            resolution=rng.choice(RESOLUTIONS).format(n=rng.randint(1, 6)) if status == "closed" else None,
            comments=comments,
        )
    return out


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


@dataclass
class TicketState:
    writer: _writes.DurableWriter
    tickets: dict[str, Ticket] = field(default_factory=_seed_tickets)
    applied: int = 0
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def refresh(self) -> None:
        """Apply writes committed since the last refresh (by this or any other process)."""
        async with self.lock:
            for record in await to_thread.run_sync(self.writer.log.since, self.applied):
                if record.sequence > self.applied:
                    self._apply(record)
                    self.applied = record.sequence

    def _apply(self, record: _writes.WriteRecord) -> None:
        ticket = self.tickets.get(record.target_id)
        if ticket is None:
            return
        args = record.arguments
        if record.tool == "add_comment":
            ticket.comments.append(
                Comment(
                    comment_id=f"{ticket.ticket_id}-c{len(ticket.comments) + 1}",
                    author=args["author"],
                    body=args["body"],
                    created=DATASET_TODAY,
                    receipt_id=record.receipt_id,
                )
            )
            ticket.comment_count = len(ticket.comments)
        elif record.tool == "close_ticket":
            ticket.status = "closed"
            ticket.resolution = args["resolution"]
        elif record.tool == "assign_ticket":
            ticket.assignee = args["assignee"]
            if ticket.status == "open":
                ticket.status = "in_progress"

    def require(self, ticket_id: str) -> Ticket:
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            raise ToolError(f"unknown ticket {ticket_id!r} (ids look like TCK-1017)")
        return ticket


def _summary(ticket: Ticket) -> TicketSummary:
    return TicketSummary.model_validate(ticket.model_dump(include=set(TicketSummary.model_fields)))


def _snippet(text: str, terms: list[str], width: int = 160) -> str:
    lowered = text.lower()
    positions = [p for p in (lowered.find(t) for t in terms) if p >= 0]
    start = max(0, min(positions) - width // 3) if positions else 0
    piece = text[start : start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


Limit = Annotated[int, Field(ge=1, le=200, description="page size, 1-200")]
TicketId = Annotated[str, Field(description="ticket id, e.g. TCK-1017", min_length=1, max_length=32)]


def create_server(state_dir: Path | None, faults: _writes.Faults) -> MCPServer:
    state = TicketState(_writes.DurableWriter(_writes.WriteLog(state_dir, "trcpt", NAME), faults))
    server = MCPServer(
        NAME,
        version=_common.SERVER_VERSION,
        instructions="Support tickets of crm customers. Ticket ids look like TCK-1017.",
        subscriptions=False,
    )
    _common.reject_unknown_tools(server)
    faults.install(server)
    read_only = _common.READ_ONLY

    @_common.tool(server, annotations=read_only)
    async def list_tickets(
        status: Status | None = None,
        assignee: Annotated[str | None, Field(description="staff handle, e.g. priya.shah")] = None,
        label: Annotated[str | None, Field(description="one of: " + ", ".join(LABELS))] = None,
        customer_id: Annotated[str | None, Field(description="crm customer id, e.g. CUST-0042")] = None,
        cursor: str | None = None,
        limit: Limit = 50,
    ) -> TicketPage:
        """List tickets ordered by id, filtered by status, assignee, label and/or customer. Paginated."""
        await state.refresh()
        rows = [
            t
            for t in state.tickets.values()
            if (status is None or t.status == status)
            and (assignee is None or t.assignee == assignee)
            and (label is None or label in t.labels)
            and (customer_id is None or t.customer_id == customer_id)
        ]
        offset = _common.decode_cursor(cursor)
        return TicketPage(
            tickets=[_summary(t) for t in rows[offset : offset + limit]],
            total=len(rows),
            next_cursor=_common.page_cursor(offset, limit, len(rows)),
        )

    @_common.tool(server, annotations=read_only)
    async def get_ticket(ticket_id: TicketId) -> Ticket:
        """Get one ticket with its body, resolution and comments."""
        await state.refresh()
        return state.require(ticket_id)

    @_common.tool(server, annotations=read_only, structured_output=False)
    async def search_tickets(
        query: Annotated[str, Field(min_length=1, max_length=200)], limit: Limit = 10
    ) -> dict[str, Any]:
        """Keyword search over ticket titles, bodies and comments.

        Answers JSON text: {"query", "total_matches", "results": [{"ticket_id", "title", "status",
        "priority", "customer_id", "score", "snippet"}]}."""
        await state.refresh()
        terms = [t for t in re.split(r"\W+", query.lower()) if t]
        if not terms:
            raise ToolError("query has no words to search for")
        hits: list[dict[str, Any]] = []
        for ticket in state.tickets.values():
            title = ticket.title.lower()
            text = " ".join([ticket.body, *(c.body for c in ticket.comments)])
            lowered = f"{ticket.ticket_id.lower()} {ticket.customer_id.lower()} {text.lower()}"
            score = sum(3 * title.count(t) + lowered.count(t) for t in terms)
            if score:
                hits.append(
                    {
                        "ticket_id": ticket.ticket_id,
                        "title": ticket.title,
                        "status": ticket.status,
                        "priority": ticket.priority,
                        "customer_id": ticket.customer_id,
                        "score": score,
                        "snippet": _snippet(ticket.body, terms),
                    }
                )
        hits.sort(key=lambda h: (-h["score"], h["ticket_id"]))
        return {"query": query, "total_matches": len(hits), "results": hits[:limit]}

    @_common.tool(server, annotations=read_only, structured_output=False)
    async def ticket_stats() -> dict[str, Any]:
        """Ticket counts by status, priority, label and assignee, and the customers with most open tickets.

        Answers JSON text."""
        await state.refresh()
        tickets = list(state.tickets.values())
        not_closed = [t for t in tickets if t.status != "closed"]
        by_customer = Counter(t.customer_id for t in not_closed)
        return {
            "total": len(tickets),
            "by_status": dict(sorted(Counter(t.status for t in tickets).items())),
            "by_priority": dict(sorted(Counter(t.priority for t in tickets).items())),
            "by_label": dict(sorted(Counter(label for t in tickets for label in t.labels).items())),
            "by_assignee": dict(sorted(Counter(t.assignee or "unassigned" for t in tickets).items())),
            "top_customers_not_closed": [
                {"customer_id": cid, "tickets": n}
                for cid, n in sorted(by_customer.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
            ],
        }

    @_common.tool(server, annotations=_common.write_annotations(destructive=False))
    async def add_comment(
        ticket_id: TicketId,
        body: Annotated[str, Field(min_length=1, max_length=10_000)],
        author: Annotated[str, Field(min_length=1, max_length=64, description="who is commenting")] = "api",
    ) -> CommentReceipt:
        """Add a comment to a ticket. Returns a receipt."""
        await state.refresh()
        state.require(ticket_id)
        record = await state.writer.write("add_comment", ticket_id, {"body": body, "author": author})
        await state.refresh()
        comment = next(c for c in state.tickets[ticket_id].comments if c.receipt_id == record.receipt_id)
        return CommentReceipt(
            receipt_id=record.receipt_id,
            sequence=record.sequence,
            tool=record.tool,
            ticket_id=ticket_id,
            comment_id=comment.comment_id,
        )

    @_common.tool(server, annotations=_common.write_annotations(destructive=True))
    async def close_ticket(
        ticket_id: TicketId, resolution: Annotated[str, Field(min_length=1, max_length=2000)]
    ) -> CloseReceipt:
        """Close a ticket with a resolution. Fails if it is already closed. Returns a receipt."""
        await state.refresh()
        ticket = state.require(ticket_id)
        previous = ticket.status
        if previous == "closed":
            raise ToolError(f"{ticket_id} is already closed")
        record = await state.writer.write("close_ticket", ticket_id, {"resolution": resolution})
        await state.refresh()
        return CloseReceipt(
            receipt_id=record.receipt_id,
            sequence=record.sequence,
            tool=record.tool,
            ticket_id=ticket_id,
            previous_status=previous,
            resolution=resolution,
        )

    @_common.tool(server, annotations=_common.write_annotations(destructive=True))
    async def assign_ticket(
        ticket_id: TicketId,
        assignee: Annotated[str, Field(description="staff handle: " + ", ".join(WORKERS))],
    ) -> AssignReceipt:
        """Assign a ticket to a support or engineering staff member (an open ticket becomes in_progress)."""
        await state.refresh()
        ticket = state.require(ticket_id)
        if assignee not in WORKERS:
            raise ToolError(f"unknown assignee {assignee!r}; staff handles: {', '.join(WORKERS)}")
        previous = ticket.assignee
        record = await state.writer.write("assign_ticket", ticket_id, {"assignee": assignee})
        await state.refresh()
        return AssignReceipt(
            receipt_id=record.receipt_id,
            sequence=record.sequence,
            tool=record.tool,
            ticket_id=ticket_id,
            previous_assignee=previous,
            assignee=assignee,
        )

    return server


def main(argv: list[str] | None = None) -> int:
    return _writes.main_with_state(
        sys.argv[1:] if argv is None else argv,
        name=NAME,
        description="Example issue-tracker MCP server (300 tickets).",
        state_env=STATE_ENV,
        fault_env=FAULT_ENV,
        create=create_server,
    )


if __name__ == "__main__":
    sys.exit(main())
