"""Writes ``ledger_v1.sql``: a ledger made by the schema-1 code, dumped as SQL.

The dump was made once, from the code before the ledger was split into a store and a core
(``python tests/ledger/data/make_ledger_v1.py``), and is committed so that
``test_schema_compat.py`` proves a newer codemode still opens, verifies and reconciles a file
written by that one. Re-running it with newer code makes a new dump, not the old one: only do
that deliberately, with a new schema version.

It uses only the public API, a fixed clock and an owner on a host that does not exist (so no
lease is settled as "owner gone"; only its expiry decides).
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from codemode.calls import CallFailed, RunBinding, ToolError, ToolResult  # noqa: E402
from codemode.ledger import ApprovalRecord, CallIntent, Fresh, open_ledger  # noqa: E402

OWNER = "fixture-host.invalid:4242:1767268800.00:f1x7f1x7"
START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def _intent(seq: int, key: str | None, **changes: Any) -> CallIntent:
    base: dict[str, Any] = {
        "call_id": f"run-1/{seq}",
        "run_id": "run-1",
        "trace_id": "trace-1",
        "principal": "alice",
        "tenant": "acme",
        "server": "crm",
        "tool": "add_note",
        "schema_hash": "sha256:" + "ab" * 32,
        "arguments": {"customer_id": 42, "text": f"note {seq}", "tags": ["a", "b"]},
        "idempotency_key": key,
    }
    base.update(changes)
    return CallIntent(**base)


def _fresh(answer: object) -> Fresh:
    assert isinstance(answer, Fresh), answer
    return answer


def build(path: Path) -> None:
    clock = _Clock()
    with open_ledger(path, clock=clock, owner=OWNER, max_result_bytes=2048, lease_s=60) as ledger:
        ledger.begin_run(
            RunBinding(run_id="run-1", principal="alice", tenant="acme", trace_id="trace-1"), "sha256:c0de"
        )
        # 1: succeeded with a receipt; 2: its replay; 3: the same key with other arguments.
        first = _fresh(ledger.reserve(_intent(1, "k1")))
        ledger.mark_sent(first.call_id)
        ledger.complete(first.call_id, ToolResult(structured={"note_id": 7}), receipt="note-7")
        ledger.reserve(_intent(2, "k1", arguments=_intent(1, "k1").arguments))
        ledger.reserve(_intent(3, "k1", arguments={"customer_id": 43}))
        # 4: no key, sent in the reserve, answered with a tool error.
        fused = _fresh(ledger.reserve(_intent(4, None), send=True))
        ledger.complete(fused.call_id, ToolError(message="customer is archived"))
        # 5: a gate said no.
        ledger.mark_denied(_intent(5, None, tool="delete_customer"), gate="policy", reason="denied by rule 3")
        # 6: sent, no answer: unknown (the compat test reconciles it).
        lost = _fresh(ledger.reserve(_intent(6, "k6")))
        ledger.mark_sent(lost.call_id)
        ledger.mark_unknown(lost.call_id, "timed out after 30 s")
        # 7: refused with Retry-After; 8: abandoned before sending.
        busy = _fresh(ledger.reserve(_intent(7, "k7")))
        ledger.mark_sent(busy.call_id)
        ledger.mark_refused(busy.call_id, "HTTP 429", retry_after_s=30)
        ledger.mark_abandoned(_fresh(ledger.reserve(_intent(8, None))).call_id, "run cancelled")
        # 9: unknown, then reconciled from a receipt; 10: a definite failure after sending.
        settled = _fresh(ledger.reserve(_intent(9, "k9"), send=True))
        ledger.mark_unknown(settled.call_id, "stream lost")
        ledger.resolve(settled.call_id, "succeeded", "crm shows note-9", receipt="note-9")
        failed = _fresh(ledger.reserve(_intent(10, "k10"), send=True))
        ledger.complete(failed.call_id, CallFailed(reason="HTTP 400: bad customer id"))
        # 11: a result over the cap (stored as a stand-in with its digest).
        big = _fresh(ledger.reserve(_intent(11, None), send=True))
        ledger.complete(big.call_id, ToolResult(structured={"blob": "x" * 5000}))
        # 12: a retry of key k7 (attempt 2) that succeeds.
        retry = _fresh(ledger.reserve(_intent(12, "k7", arguments=_intent(7, "k7").arguments)))
        ledger.mark_sent(retry.call_id)
        ledger.complete(retry.call_id, ToolResult(structured={"note_id": 12}), receipt="note-12")
        # Approvals: one consumed by call 13, one pre-issued and unused, one bound to a call.
        for approval_id, call_id in (("ap-1", None), ("ap-2", None), ("ap-3", "run-1/99")):
            ledger.record_approval(
                ApprovalRecord(
                    approval_id=approval_id,
                    tenant="acme",
                    principal="alice",
                    server="crm",
                    tool="add_note",
                    args_digest="sha256:" + "cd" * 32,
                    risk="high" if approval_id == "ap-1" else "medium",
                    call_id=call_id,
                    approver="bob",
                    issued_at=START,
                    expires_at=START + timedelta(days=3650),
                    note="fixture",
                )
            )
        used = ledger.consume_approval(
            "ap-1",
            call_id="run-1/13",
            tenant="acme",
            principal="alice",
            server="crm",
            tool="add_note",
            args_digest="sha256:" + "cd" * 32,
            risk="medium",
        )
        assert used.kind == "consumed", used
        # 14: left in flight by a broker on another host; its lease has long expired.
        _fresh(ledger.reserve(_intent(14, "k14"), send=True))
        ledger.finish_run("run-1", "ok", {"calls": 14, "note": "fixture"})
        # run-2 is still running on the other host.
        ledger.begin_run(
            RunBinding(run_id="run-2", principal="bob", tenant="acme", trace_id="trace-2"), "sha256:beef"
        )
        assert ledger.verify().ok


def main() -> None:
    out = Path(__file__).with_name("ledger_v1.sql")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"
        build(path)
        conn = sqlite3.connect(path)
        try:
            out.write_text("\n".join(conn.iterdump()) + "\n", encoding="utf-8")
        finally:
            conn.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
