"""Async helpers for the broker: waiting on a key's call without pinning a worker thread,
and reconciling an unknown call by reading the server's state back.

Ledger methods block, so each one runs in a worker thread; the waiting in between is an
``anyio.sleep``, so thousands of waiting calls cost no threads.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict

from codemode.ledger._api import Ledger
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._models import IN_FLIGHT, CallIntent, CallRecord, InFlight, Reservation, Resolution
from codemode.ledger._owner import owner_alive


async def reserve_waiting(
    ledger: Ledger,
    intent: CallIntent,
    *,
    wait_s: float,
    poll_s: float = 0.05,
    lease_s: float | None = None,
    send: bool = False,
    durable: bool = True,
    limiter: anyio.CapacityLimiter | None = None,
) -> Reservation:
    """``reserve``; while another call holds the key, wait for it and reserve again.

    Returns the first answer that is not :class:`InFlight` — so two concurrent calls with one
    key end with one ``Fresh`` (which sends) and one ``Replay`` of its outcome — or the
    ``InFlight`` itself when ``wait_s`` runs out (the broker then fails this call with
    "another call with this key is still running"; it was not sent).
    """
    deadline = anyio.current_time() + wait_s
    reserve = functools.partial(ledger.reserve, intent, lease_s=lease_s, send=send, durable=durable)
    while True:
        answer = await anyio.to_thread.run_sync(reserve, limiter=limiter)
        if not isinstance(answer, InFlight):
            return answer
        while True:
            if anyio.current_time() >= deadline:
                return answer
            await anyio.sleep(poll_s)
            record = await anyio.to_thread.run_sync(ledger.get_call, answer.call_id, limiter=limiter)
            if record is None or record.state not in IN_FLIGHT:
                break
            lease_over = record.lease_expires_at is not None and record.lease_expires_at <= datetime.now(UTC)
            if lease_over or owner_alive(record.owner) is False:
                break  # reserve() settles it (unknown / abandoned) under the write lock


class ReadBackVerdict(BaseModel):
    """What a read-back found out about an unknown call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resolution: Resolution
    evidence: str
    """What was read and what it showed, e.g. ``crm/get_customer(42) shows note 'x' at 10:02``."""
    receipt: str | None = None
    result: Any = None
    """For ``succeeded``: the result later calls with the key replay (default: a description)."""


ReadBack = Callable[[CallRecord], Awaitable[ReadBackVerdict | None]]
"""Looks at the server (e.g. calls a read tool with ``call.arguments``) and decides, or returns
None when it cannot tell. It must not repeat the call's side effect."""


async def resolve_with_read_back(
    ledger: Ledger, call_id: str, read_back: ReadBack, *, resolved_by: str = "read-back"
) -> CallRecord:
    """Reconcile one ``unknown`` call with ``read_back``; unchanged when it cannot tell."""
    record = await anyio.to_thread.run_sync(ledger.get_call, call_id)
    if record is None:
        raise LedgerStateError(f"no call {call_id!r} in the ledger")
    if record.state != "unknown":
        raise LedgerStateError(f"call {call_id} is {record.state}, not unknown: nothing to reconcile")
    verdict = await read_back(record)
    if verdict is None:
        return record
    resolve = functools.partial(
        ledger.resolve,
        call_id,
        verdict.resolution,
        verdict.evidence,
        receipt=verdict.receipt,
        result=verdict.result,
        resolved_by=resolved_by,
    )
    return await anyio.to_thread.run_sync(resolve)
