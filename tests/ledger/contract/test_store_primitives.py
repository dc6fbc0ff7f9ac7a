"""The storage primitives every :class:`LedgerStore` must provide, checked through the Protocol only."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from codemode.ledger import ApprovalQuery, CallQuery, LedgerStore, RunQuery, StoreError
from codemode.ledger._reduce import empty_row
from codemode.ledger._schema import COLUMNS
from tests.ledger._rows import approval_row, call_row, event

OpenClient = Callable[[], LedgerStore]


def test_a_new_store_has_an_id_an_empty_log_and_a_head_at_zero(connect: OpenClient) -> None:
    first = connect()
    with first.transaction(write=False) as tx:
        ledger_id = tx.ledger_id()
        assert ledger_id
        head = tx.head()
        assert head is not None and head[0] == 0
        assert tx.last_event() is None
        assert list(tx.events()) == []
        assert tx.integrity_problems() == []
    with connect().transaction(write=False) as tx:  # a second client sees the same store
        assert tx.ledger_id() == ledger_id


def test_events_are_appended_in_order_and_move_the_head(store: LedgerStore) -> None:
    with store.transaction(write=True) as tx:
        for seq in (1, 2, 3):
            tx.append(event(seq, subject="a" if seq != 2 else "b"))
    with store.transaction(write=False) as tx:
        assert tx.head() == (3, "h3") == tx.last_event()
        assert [e.seq for e in tx.events()] == [1, 2, 3]
        assert [e.seq for e in tx.events(subject="a")] == [1, 3]
        assert [e.seq for e in tx.events(limit=2)] == [1, 2]
        assert list(tx.events())[1] == event(2, subject="b")
        assert tx.event_hash(2) == "h2"
        assert tx.event_hash(9) is None


def _write_then_fail(store: LedgerStore) -> None:
    with store.transaction(write=True) as tx:
        tx.append(event(1))
        tx.insert("calls", call_row("c1"))
        raise RuntimeError("boom")


def test_a_failed_transaction_changes_nothing(store: LedgerStore) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        _write_then_fail(store)
    with store.transaction(write=False) as tx:
        assert tx.last_event() is None
        assert tx.row("calls", "c1") is None
        head = tx.head()
        assert head is not None and head[0] == 0


def test_rows_come_back_exactly_as_stored(store: LedgerStore) -> None:
    row = call_row("c1", attempt=3, idem_key="k", args_json='{"a":"\\u00e9 ✓"}', result_bytes=2**40)
    with store.transaction(write=True) as tx:
        tx.insert("calls", row)
        tx.update("calls", "c1", {"state": "failed", "reason": None, "receipt": "r-1"})
    with store.transaction(write=False) as tx:
        stored = tx.row("calls", "c1")
        assert stored == {**row, "state": "failed", "receipt": "r-1"}
        assert stored is not None and list(stored) == list(COLUMNS["calls"])
        assert list(tx.rows("calls")) == [stored]
        assert tx.row("calls", "nope") is None


def test_key_attempts_first_and_latest(store: LedgerStore) -> None:
    with store.transaction(write=True) as tx:
        tx.insert("calls", call_row("c1", idem_key="k", attempt=1, state="refused"))
        tx.insert("calls", call_row("c3", idem_key="k", attempt=3, state="succeeded"))
        tx.insert("calls", call_row("c2", idem_key="k", attempt=2, state="abandoned"))
        tx.insert("calls", call_row("d", idem_key="k", attempt=None, state="replayed"))
    with store.transaction(write=False) as tx:
        first, latest = tx.key_attempt("k", latest=False), tx.key_attempt("k", latest=True)
        assert first is not None and first["call_id"] == "c1"
        assert latest is not None and latest["call_id"] == "c3"
        assert tx.key_attempt("other", latest=True) is None


def test_the_store_refuses_two_holders_of_one_key_and_a_repeated_attempt(store: LedgerStore) -> None:
    with store.transaction(write=True) as tx:
        tx.insert("calls", call_row("c1", idem_key="k", attempt=1, state="sent"))
    with pytest.raises(StoreError), store.transaction(write=True) as tx:
        tx.insert("calls", call_row("c2", idem_key="k", attempt=2, state="reserved"))
    with pytest.raises(StoreError), store.transaction(write=True) as tx:
        tx.insert("calls", call_row("c2", idem_key="k", attempt=1, state="refused"))
    with store.transaction(write=True) as tx:  # a freeing state does not hold the key
        tx.update("calls", "c1", {"state": "refused"})
        tx.insert("calls", call_row("c2", idem_key="k", attempt=2, state="reserved"))
        tx.insert("calls", call_row("c3", idem_key="k", attempt=None, state="denied"))


def test_call_queries_filter_and_order_by_creation_then_insertion(store: LedgerStore) -> None:
    t1, t2 = "2026-01-01T00:00:01.000000Z", "2026-01-01T00:00:02.000000Z"
    with store.transaction(write=True) as tx:
        tx.insert("calls", call_row("z", created=t1, state="unknown"))
        tx.insert("calls", call_row("a", created=t1, state="sent", receipt="r"))
        tx.insert("calls", call_row("m", created=t2, state="unknown", run_id="run-2", receipt="r"))
        tx.insert("calls", call_row("e", created=t2, server="memory", receipt=""))
    with store.transaction(write=False) as tx:

        def ids(query: CallQuery) -> list[str | int | None]:
            return [r["call_id"] for r in tx.calls(query)]

        assert ids(CallQuery()) == ["z", "a", "m", "e"]
        assert ids(CallQuery(newest_first=True)) == ["e", "m", "a", "z"]
        assert ids(CallQuery(limit=2)) == ["z", "a"]
        assert ids(CallQuery(states=frozenset({"unknown"}))) == ["z", "m"]
        assert ids(CallQuery(states=frozenset({"unknown", "sent"}), run_id="run-1")) == ["z", "a"]
        assert ids(CallQuery(receipt="r")) == ["a", "m"]
        # Whether a server gives receipts: an empty one is none.
        assert ids(CallQuery(with_receipt=True)) == ["a", "m"]
        assert ids(CallQuery(server="crm", with_receipt=True, limit=1)) == ["a"]
        assert ids(CallQuery(server="memory")) == ["e"]
        assert ids(CallQuery(server="memory", with_receipt=True)) == []
        assert ids(CallQuery(states=frozenset())) == []


def test_run_queries_are_newest_first(store: LedgerStore) -> None:
    with store.transaction(write=True) as tx:
        for run_id, started, status in (("r1", "1", "ok"), ("r2", "3", "running"), ("r3", "2", "running")):
            row = empty_row("runs")
            row.update(
                run_id=run_id,
                principal="p",
                tenant="t",
                trace_id="x",
                code_digest="d",
                status=status,
                started_at=f"2026-01-01T00:00:0{started}.000000Z",
            )
            tx.insert("runs", row)
    with store.transaction(write=False) as tx:
        assert [r["run_id"] for r in tx.runs(RunQuery())] == ["r2", "r3", "r1"]
        assert [r["run_id"] for r in tx.runs(RunQuery(limit=1))] == ["r2"]
        assert [r["run_id"] for r in tx.runs(RunQuery(status="running"))] == ["r2", "r3"]


def insert_runs(store: LedgerStore, runs: tuple[tuple[str, str, str, str, str], ...]) -> None:
    """Runs of ``(run_id, principal, tenant, status, second)``, started at that second."""
    with store.transaction(write=True) as tx:
        for run_id, principal, tenant, status, second in runs:
            row = empty_row("runs")
            row.update(
                run_id=run_id,
                principal=principal,
                tenant=tenant,
                trace_id="x",
                code_digest="d",
                status=status,
                started_at=f"2026-01-01T00:00:0{second}.000000Z",
            )
            tx.insert("runs", row)


def found_runs(store: LedgerStore, query: RunQuery) -> list[str]:
    with store.transaction(write=False) as tx:
        return [str(r["run_id"]) for r in tx.runs(query)]


def test_run_queries_filter_in_the_store_and_list_each_principal_tenant_and_status(
    store: LedgerStore,
) -> None:
    runs = (
        ("r1", "alice", "acme", "ok", "1"),
        ("r2", "bob", "acme", "error", "2"),
        ("r3", "alice", "globex", "running", "3"),
        ("r4", "alice", "acme", "running", "4"),
    )
    insert_runs(store, runs)

    def found(query: RunQuery) -> list[str]:
        return found_runs(store, query)

    assert found(RunQuery(principal="alice")) == ["r4", "r3", "r1"]
    assert found(RunQuery(principal="alice", tenant="acme")) == ["r4", "r1"]
    assert found(RunQuery(principal="alice", tenant="acme", limit=1)) == ["r4"]
    assert found(RunQuery(status="running", tenant="globex")) == ["r3"]
    assert found(RunQuery(since="2026-01-01T00:00:02.000000Z", until="2026-01-01T00:00:03.000000Z")) == [
        "r3",
        "r2",
    ], "both ends inclusive"
    assert found(RunQuery(principal="alice' OR '1'='1")) == [], "values are parameters, never SQL"
    with store.transaction(write=False) as tx:
        assert tx.run_values("principal") == ["alice", "bob"]
        assert tx.run_values("tenant") == ["acme", "globex"]
        assert tx.run_values("status") == ["error", "ok", "running"]
        with pytest.raises(ValueError, match="cannot be listed"):
            tx.run_values("code_digest")  # pyright: ignore[reportArgumentType]
        # One tenant's values only (the operator console of that tenant lists no other's).
        assert tx.run_values("principal", "acme") == ["alice", "bob"]
        assert tx.run_values("principal", "globex") == ["alice"]
        assert tx.run_values("status", "acme") == ["error", "ok", "running"]
        assert tx.run_values("status", "globex") == ["running"]
        assert tx.run_values("tenant", "globex") == ["globex"]
        assert tx.run_values("principal", "initech") == []
        assert tx.run_values("principal", "acme' OR '1'='1") == [], "the tenant is a parameter, never SQL"
        with pytest.raises(ValueError, match="cannot be listed"):
            tx.run_values("code_digest", "acme")  # pyright: ignore[reportArgumentType]


ODD_TENANT = "o'hare\"; DROP TABLE runs; --"
"""A tenant name made of SQL: it must match itself, as a value, and nothing else."""


def test_run_queries_select_several_tenants_in_one_order_under_one_limit(store: LedgerStore) -> None:
    runs = (
        ("r1", "alice", "acme", "ok", "1"),
        ("r2", "bob", "globex", "error", "2"),
        ("r3", "carol", "initech", "ok", "3"),
        ("r4", "alice", "acme", "running", "4"),
        ("r5", "dave", "globex", "ok", "4"),  # the same moment as r4: run_id breaks the tie
        ("r6", "erin", ODD_TENANT, "ok", "5"),
        ("r7", "frank", "a%_", "ok", "6"),  # LIKE wildcards are plain characters too
    )
    insert_runs(store, runs)

    def found(query: RunQuery) -> list[str]:
        return found_runs(store, query)

    two = ("acme", "globex")
    assert found(RunQuery(tenants=two)) == ["r5", "r4", "r2", "r1"], "one order across the tenants"
    assert found(RunQuery(tenants=("globex", "acme"))) == ["r5", "r4", "r2", "r1"]
    assert found(RunQuery(tenants=("acme", "acme"))) == ["r4", "r1"]
    assert found(RunQuery(tenants=(*two, "nobody"))) == ["r5", "r4", "r2", "r1"]
    # The limit applies to the runs of every tenant together, not to each tenant's own.
    assert found(RunQuery(tenants=two, limit=1)) == ["r5"]
    assert found(RunQuery(tenants=two, limit=3)) == ["r5", "r4", "r2"]
    # Paging back in time: the next page starts before the oldest run of the last one.
    assert found(RunQuery(tenants=two, limit=2)) == ["r5", "r4"]
    assert found(RunQuery(tenants=two, until="2026-01-01T00:00:03.999999Z", limit=2)) == ["r2", "r1"]
    assert found(RunQuery(tenants=two, until="2026-01-01T00:00:00.999999Z", limit=2)) == []
    # With the other filters, and with ``tenant`` (both apply).
    assert found(RunQuery(tenants=two, status="ok")) == ["r5", "r1"]
    assert found(RunQuery(tenants=two, principal="alice", limit=1)) == ["r4"]
    assert found(RunQuery(tenants=two, since="2026-01-01T00:00:02.000000Z")) == ["r5", "r4", "r2"]
    assert found(RunQuery(tenants=two, tenant="globex")) == ["r5", "r2"]
    assert found(RunQuery(tenants=("acme",), tenant="initech")) == []
    # No tenant at all selects no run: an empty scope must never widen to every tenant.
    assert found(RunQuery(tenants=())) == []
    assert found(RunQuery(tenants=(), status="ok", limit=5)) == []
    assert found(RunQuery(tenants=(), tenant="acme")) == []
    # Tenant names are parameters, never SQL, however they are spelt.
    assert found(RunQuery(tenants=("acme' OR '1'='1",))) == []
    assert found(RunQuery(tenants=("x') OR ('1'='1", "acme"))) == ["r4", "r1"]
    assert found(RunQuery(tenants=(ODD_TENANT,))) == ["r6"]
    assert found(RunQuery(tenants=("a%_",))) == ["r7"]
    assert found(RunQuery(tenants=("a%", "%", "_cme"))) == []
    many = (*(f"tenant-{n}" for n in range(1000)), "initech")
    assert found(RunQuery(tenants=many)) == ["r3"], "a long list of tenants is one query too"
    assert len(found(RunQuery())) == len(runs), "the table is still there"

    with store.transaction(write=False) as tx:
        assert tx.run_values("principal", tenants=two) == ["alice", "bob", "dave"]
        assert tx.run_values("status", tenants=two) == ["error", "ok", "running"]
        assert tx.run_values("tenant", tenants=(ODD_TENANT, "globex", "nobody")) == sorted(
            [ODD_TENANT, "globex"]
        )
        assert tx.run_values("principal", "acme", tenants=two) == ["alice"]
        assert tx.run_values("principal", "initech", tenants=two) == []
        for facet in ("principal", "tenant", "status"):
            assert tx.run_values(facet, tenants=()) == [], facet
            assert tx.run_values(facet, tenants=("acme' OR '1'='1",)) == [], facet
        assert tx.run_values("principal", tenants=("a%_",)) == ["frank"]
        with pytest.raises(ValueError, match="cannot be listed"):
            tx.run_values("code_digest", tenants=two)  # pyright: ignore[reportArgumentType]


def test_approval_query_finds_only_usable_pre_issued_matches_in_issue_order(store: LedgerStore) -> None:
    with store.transaction(write=True) as tx:
        tx.insert("approvals", approval_row("late", issued_at="2026-01-01T00:00:05.000000Z"))
        tx.insert("approvals", approval_row("early"))
        tx.insert("approvals", approval_row("bound", call_id="run-1/1"))
        tx.insert("approvals", approval_row("used", used_at="2026-01-01T00:00:09.000000Z", used_by_call="x"))
        tx.insert("approvals", approval_row("other-args", args_digest="sha256:b"))
        tx.insert("approvals", approval_row("expired", expires_at="2026-01-01T00:00:10.000000Z"))
    query = ApprovalQuery(
        tenant="acme",
        principal="alice",
        server="crm",
        tool="add_note",
        args_digest="sha256:a",
        usable_at="2026-01-01T00:00:10.000000Z",  # "expired" expires exactly now: not usable
    )
    with store.transaction(write=False) as tx:
        assert [r["approval_id"] for r in tx.approvals(query)] == ["early", "late"]


def test_writers_on_separate_clients_are_serialised(connect: OpenClient) -> None:
    """Read-decide-write inside a write transaction is atomic across clients: no lost update."""
    clients = [connect() for _ in range(4)]
    with clients[0].transaction(write=True) as tx:
        tx.insert("calls", call_row("counter", result_bytes=0))
    errors: list[BaseException] = []

    def bump(client: LedgerStore) -> None:
        try:
            for _ in range(25):
                with client.transaction(write=True) as tx:
                    row = tx.row("calls", "counter")
                    assert row is not None
                    tx.update("calls", "counter", {"result_bytes": int(row["result_bytes"] or 0) + 1})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=bump, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    with clients[0].transaction(write=False) as tx:
        row = tx.row("calls", "counter")
    assert row is not None and row["result_bytes"] == 100


def test_commits_are_counted_and_wake_a_waiter(store: LedgerStore) -> None:
    seen = store.commits()
    with store.transaction(write=False):
        pass
    assert store.commits() == seen  # reads do not count
    woke = threading.Event()

    def waiter() -> None:
        store.wait_for_commit(seen, 60)
        woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    with store.transaction(write=True) as tx:
        tx.append(event(1))
    thread.join(timeout=60)
    assert woke.is_set()
    assert store.commits() == seen + 1
    store.wait_for_commit(seen, 60)  # already past: returns at once


def test_a_closed_store_refuses_work(connect: OpenClient) -> None:
    store = connect()
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError), store.transaction(write=False):
        pass


def test_drop_archived_deletes_a_prefix_records_the_boundary_and_keeps_the_guard(store: LedgerStore) -> None:
    with store.transaction(write=True) as tx:
        assert tx.archived() is None
        for seq in (1, 2, 3):
            tx.append(event(seq))
    with store.transaction(write=True) as tx:
        tx.drop_archived((2, "h2"))
    with store.transaction(write=False) as tx:
        assert tx.archived() == (2, "h2")
        assert [e.seq for e in tx.events()] == [3]
        assert tx.head() == (3, "h3") == tx.last_event()
        assert tx.integrity_problems() == []  # the append-only guard is back in force
    with store.transaction(write=True) as tx:  # the log goes on after the boundary
        tx.append(event(4))
        tx.drop_archived((3, "h3"))
    with store.transaction(write=False) as tx:
        assert tx.archived() == (3, "h3")
        assert [e.seq for e in tx.events()] == [4]
