"""Runs: started, finished (or interrupted by recovery), read back."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from codemode.calls import RunBinding
from codemode.ledger._context import LedgerContext
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._events import emit
from codemode.ledger._models import RunRecord
from codemode.ledger._records import run_record
from codemode.ledger._stored import stored_summary
from codemode.ledger._time import to_text
from codemode.ledger.stores import RunFacet, RunQuery


def started_fields(
    ctx: LedgerContext, binding: RunBinding, code_digest: str, now: datetime
) -> dict[str, Any]:
    """The ``run_started`` event's fields: who runs what, from when, owned by this ledger."""
    return {
        "run_id": binding.run_id,
        "principal": binding.principal,
        "tenant": binding.tenant,
        "trace_id": binding.trace_id,
        "session_id": binding.session_id,
        "code_digest": code_digest,
        "status": "running",
        "owner": ctx.owner,
        "started_at": to_text(now),
    }


def begin_run(ctx: LedgerContext, binding: RunBinding, code_digest: str) -> RunRecord:
    with ctx.write() as tx:
        fields = started_fields(ctx, binding, code_digest, ctx.now())
        row = emit(ctx, tx, "run_started", binding.run_id, fields)
    return run_record(row)


def finish_run(ctx: LedgerContext, run_id: str, status: str, summary: Mapping[str, Any] | None) -> RunRecord:
    if not status or status == "running":
        raise LedgerStateError("finish_run needs a final status (e.g. 'ok', 'error', 'timeout')")
    summary_json = stored_summary(summary)
    with ctx.write() as tx:
        fields = {"status": status, "summary_json": summary_json, "finished_at": to_text(ctx.now())}
        row = emit(ctx, tx, "run_finished", run_id, fields)
    return run_record(row)


def get_run(ctx: LedgerContext, run_id: str) -> RunRecord | None:
    with ctx.read() as tx:
        row = tx.row("runs", run_id)
    return None if row is None else run_record(row)


def list_runs(ctx: LedgerContext, query: RunQuery) -> list[RunRecord]:
    with ctx.read() as tx:
        rows = tx.runs(query)
    return [run_record(r) for r in rows]


def run_values(
    ctx: LedgerContext, column: RunFacet, tenant: str | None = None, *, tenants: tuple[str, ...] | None = None
) -> list[str]:
    with ctx.read() as tx:
        return tx.run_values(column, tenant, tenants=tenants)
