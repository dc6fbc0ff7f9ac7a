"""The link from a compensating call to the call it undoes, on every store: recorded with the
call, found by ``compensations_of``, and covered by ``verify``."""

from __future__ import annotations

from codemode.calls import RunBinding, ToolError, ToolResult
from codemode.ledger import Fresh, StoreLedger
from tests.ledger.conftest import make_intent


def _done(ledger: StoreLedger, seq: int, *, compensates: str | None = None, ok: bool = True) -> str:
    fresh = ledger.reserve(make_intent(seq, key=f"k{seq}", compensates=compensates))
    assert isinstance(fresh, Fresh)
    ledger.mark_sent(fresh.call_id)
    ledger.complete(fresh.call_id, ToolResult() if ok else ToolError(message="no such note"))
    return fresh.call_id


def test_a_compensation_is_found_by_the_call_it_undoes(ledger: StoreLedger) -> None:
    ledger.begin_run(RunBinding(run_id="run-1", principal="alice", tenant="acme", trace_id="t"), "sha256:c")
    first, second = _done(ledger, 1), _done(ledger, 2)
    undo = _done(ledger, 3, compensates=second)
    failed = _done(ledger, 4, compensates=first, ok=False)
    found = ledger.compensations_of([first, second])
    assert [(c.call_id, c.compensates, c.state) for c in found] == [
        (undo, second, "succeeded"),
        (failed, first, "failed"),
    ]
    assert ledger.compensations_of([second]) == [found[0]]
    assert ledger.compensations_of([]) == []
    assert ledger.get_call(first) is not None and ledger.get_call(first).compensates is None  # type: ignore[union-attr]
    assert ledger.verify().ok


def test_an_ordinary_call_writes_no_link_into_its_event(ledger: StoreLedger) -> None:
    # Events written before the column existed hold no link: an ordinary call's must not either,
    # so its payload is the same as before.
    call_id = _done(ledger, 1)
    assert all("compensates" not in e.payload for e in ledger.events(call_id))
    undo = _done(ledger, 2, compensates=call_id)
    assert ledger.events(undo)[0].payload["compensates"] == call_id
