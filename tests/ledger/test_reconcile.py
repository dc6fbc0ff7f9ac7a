"""Reconciliation hooks: read-back through a callable, and the in-memory ledger for tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codemode.calls import ToolResult
from codemode.ledger import (
    CallIntent,
    CallRecord,
    Fresh,
    LedgerStateError,
    ReadBackVerdict,
    Replay,
    SqliteLedger,
    open_ledger,
    resolve_with_read_back,
)

Intent = Callable[..., CallIntent]
pytestmark = pytest.mark.anyio


def unknown_call(ledger: SqliteLedger, intent: CallIntent) -> str:
    answer = ledger.reserve(intent)
    assert isinstance(answer, Fresh)
    ledger.mark_sent(answer.call_id)
    ledger.mark_unknown(answer.call_id, "stream lost")
    return answer.call_id


async def test_a_read_back_that_finds_the_effect_reconciles_as_succeeded(
    ledger: SqliteLedger, intent: Intent
) -> None:
    call_id = unknown_call(ledger, intent(0))
    seen: list[CallRecord] = []

    async def read_back(call: CallRecord) -> ReadBackVerdict:
        seen.append(call)
        return ReadBackVerdict(
            resolution="succeeded",
            evidence="get_customer(42) lists the note",
            receipt="note-7",
            result={"note_id": 7},
        )

    settled = await resolve_with_read_back(ledger, call_id, read_back)
    assert seen[0].arguments == {"customer_id": 42, "text": "hello"}
    assert (settled.state, settled.resolved_by, settled.receipt) == (
        "reconciled_succeeded",
        "read-back",
        "note-7",
    )
    replay = ledger.reserve(intent(1))
    assert isinstance(replay, Replay)
    assert replay.outcome == ToolResult(structured={"note_id": 7})


async def test_a_read_back_that_cannot_tell_leaves_the_call_unknown(
    ledger: SqliteLedger, intent: Intent
) -> None:
    call_id = unknown_call(ledger, intent(0))

    async def read_back(call: CallRecord) -> None:
        return None

    assert (await resolve_with_read_back(ledger, call_id, read_back)).state == "unknown"


async def test_read_back_refuses_a_call_that_is_not_unknown(ledger: SqliteLedger, intent: Intent) -> None:
    answer = ledger.reserve(intent(0))
    assert isinstance(answer, Fresh)

    async def read_back(call: CallRecord) -> Any:
        raise AssertionError("must not be asked")

    with pytest.raises(LedgerStateError, match="not unknown"):
        await resolve_with_read_back(ledger, answer.call_id, read_back)


async def test_an_in_memory_ledger_behaves_like_the_file(intent: Intent) -> None:
    with open_ledger(":memory:") as ledger:
        call_id = unknown_call(ledger, intent(0))
        ledger.resolve(call_id, "failed", "no note")
        assert isinstance(ledger.reserve(intent(1)), Fresh)
        assert ledger.verify().ok
