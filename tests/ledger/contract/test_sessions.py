"""MCP session bindings, on every store: written once by one client (a replica of serve), read by
another, never rebound, kept only as a digest of the id, and covered by ``verify``."""

from __future__ import annotations

import pytest

from codemode.ledger import LedgerStateError, LedgerStore, StoreLedger
from tests.ledger.contract.conftest import MakeLedger, OpenClient

SESSION = "0123456789abcdef0123456789abcdef"
"""A session id as the SDK mints them (``uuid4().hex``)."""


def _every_value(store: LedgerStore) -> str:
    """Everything the store holds about sessions and events, as one text to search."""
    with store.transaction(write=False) as tx:
        events = [(e.subject, e.payload) for e in tx.events()]
        rows = list(tx.rows("mcp_sessions"))
    return repr((events, rows))


def test_a_binding_made_by_one_replica_is_read_by_another(
    connect: OpenClient, make_ledger: MakeLedger
) -> None:
    first, second = make_ledger(connect()), make_ledger(connect())
    bound = first.bind_session(SESSION, principal="alice", tenant="acme")
    read = second.session_binding(SESSION)
    assert read == bound
    assert (bound.principal, bound.tenant, bound.owner) == ("alice", "acme", first.owner)
    assert second.session_binding("f" * 32) is None, "a session no one opened has no owner"


def test_a_session_is_never_rebound(ledger: StoreLedger) -> None:
    bound = ledger.bind_session(SESSION, principal="alice", tenant="acme")
    assert ledger.bind_session(SESSION, principal="alice", tenant="acme") == bound, "a retry is harmless"
    for principal, tenant in (("bob", "acme"), ("alice", "globex"), ("alice", "")):
        with pytest.raises(LedgerStateError, match="never rebound"):
            ledger.bind_session(SESSION, principal=principal, tenant=tenant)
    assert ledger.session_binding(SESSION) == bound
    assert [e.kind for e in ledger.events()] == ["mcp_session_bound"], "one event, nothing else written"
    assert ledger.verify().ok


def test_the_ledger_keeps_a_digest_of_the_id_never_the_id(ledger: StoreLedger) -> None:
    bound = ledger.bind_session(SESSION, principal="alice", tenant="acme")
    assert bound.session_digest.startswith("sha256:") and SESSION not in bound.session_digest
    assert SESSION not in _every_value(ledger.store)
    assert bound.session_digest in _every_value(ledger.store)


def test_a_rebinding_written_behind_the_ledgers_back_is_found_by_verify(ledger: StoreLedger) -> None:
    bound = ledger.bind_session(SESSION, principal="alice", tenant="acme")
    ledger.bind_session("e" * 32, principal="bob", tenant="acme")
    with ledger.store.transaction(write=True) as tx:  # what someone with write access could do
        tx.update("mcp_sessions", bound.session_digest, {"principal": "bob"})
    report = ledger.verify()
    where = [(p.kind, p.where) for p in report.problems]
    assert where == [("row_edited", f"mcp_sessions/{bound.session_digest} column principal")]
