"""Hand-built store rows and events, shared by the store contract suite and the PostgreSQL tests."""

from __future__ import annotations

from codemode.ledger import EventRow
from codemode.ledger._reduce import Row, empty_row


def call_row(
    call_id: str, *, created: str = "2026-01-01T00:00:01.000000Z", **fields: str | int | None
) -> Row:
    row = empty_row("calls")
    row.update(
        call_id=call_id,
        run_id="run-1",
        trace_id="t",
        principal="alice",
        tenant="acme",
        server="crm",
        tool="add_note",
        schema_hash="sha256:s",
        args_digest="sha256:a",
        state="succeeded",
        created_at=created,
        updated_at=created,
        result_truncated=0,
    )
    row.update(fields)
    return row


def approval_row(approval_id: str, **fields: str | int | None) -> Row:
    row = empty_row("approvals")
    row.update(
        approval_id=approval_id,
        tenant="acme",
        principal="alice",
        server="crm",
        tool="add_note",
        args_digest="sha256:a",
        risk="high",
        approver="bob",
        issued_at="2026-01-01T00:00:00.000000Z",
        expires_at="2026-01-02T00:00:00.000000Z",
    )
    row.update(fields)
    return row


def event(seq: int, prev: str = "p", subject: str = "s") -> EventRow:
    return EventRow(
        seq=seq,
        at="2026-01-01T00:00:00.000000Z",
        kind="k",
        subject=subject,
        payload="{}",
        prev_hash=prev,
        hash=f"h{seq}",
    )
