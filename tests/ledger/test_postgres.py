"""The PostgreSQL store beyond the contract suite (``tests/ledger/contract`` runs that on it too):
brokers sharing one database, the password kept out of messages, lost connections, the
server-side guard rails, and ``open_ledger`` given a URL. Runs on the throwaway server of
``tests/ledger/_pg.py``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from codemode.calls import RunBinding, ToolResult
from codemode.errors import LedgerError
from codemode.ledger import (
    CallIntent,
    Fresh,
    InFlight,
    Replay,
    Reservation,
    StoreError,
    StoreLedger,
    open_ledger,
)
from codemode.ledger._owner import new_owner
from codemode.ledger.stores import PostgresStore
from tests.ledger._pg import ROLE, PostgresServer
from tests.ledger._rows import call_row, event

pytestmark = pytest.mark.postgres

OpenStore = Callable[..., PostgresStore]
Intent = Callable[..., CallIntent]


@pytest.fixture
def database(postgres_server: PostgresServer) -> Iterator[str]:
    name = postgres_server.new_database()
    yield name
    postgres_server.drop_database(name)


@pytest.fixture
def url(postgres_server: PostgresServer, database: str) -> str:
    return postgres_server.url(database)


@pytest.fixture
def open_store(url: str) -> Generator[OpenStore]:
    """``open_store(url=..., **options)``: a new client of the test's database, closed afterwards."""
    opened: list[PostgresStore] = []

    def make(**options: Any) -> PostgresStore:
        store = PostgresStore.open(options.pop("url", url), **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def raw(url: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A plain connection as the ledger's role: what someone with psql could do."""
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


# ── several brokers on one database ────────────────────────────────────────────────────────


def _race(brokers: list[StoreLedger], intents: list[CallIntent]) -> list[Reservation]:
    """Each broker reserves its intent in its own thread, all released at once."""
    barrier = threading.Barrier(len(brokers))
    answers: dict[int, Reservation] = {}
    errors: list[BaseException] = []

    def reserve(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            answers[n] = brokers[n].reserve(intents[n])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reserve, args=(n,)) for n in range(len(brokers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return [answers[n] for n in range(len(brokers))]


def test_two_brokers_racing_for_one_key_make_exactly_one_claim(
    open_store: OpenStore, clock: Any, intent: Intent
) -> None:
    brokers = [StoreLedger(open_store(), clock=clock, owner=new_owner()) for _ in range(2)]
    for round_ in range(20):
        answers = _race(brokers, [intent(10 * round_ + n, key=f"key-{round_}") for n in range(2)])
        won = [a for a in answers if isinstance(a, Fresh)]
        lost = [a for a in answers if isinstance(a, InFlight)]
        assert len(won) == 1 and len(lost) == 1, answers
        assert lost[0].call_id == won[0].call_id
    with brokers[0].store.transaction(write=False) as tx:
        assert len(list(tx.rows("calls"))) == 20  # the losers recorded nothing
    assert brokers[1].verify().ok


def test_a_read_transaction_sees_one_snapshot_while_another_client_writes(open_store: OpenStore) -> None:
    reader, writer = open_store(), open_store()
    with reader.transaction(write=False) as tx:
        before = tx.head()
        assert before is not None
        with writer.transaction(write=True) as wtx:
            wtx.append(event(1, prev=before[1]))
        assert tx.head() == before and tx.last_event() is None
    with reader.transaction(write=False) as tx:
        assert tx.head() == (1, "h1")


def test_a_writer_waits_for_the_lock_at_most_its_timeout(open_store: OpenStore) -> None:
    holder, waiter = open_store(), open_store(lock_timeout_s=0.2)
    with holder.transaction(write=True) as tx:
        tx.append(event(1))
        with pytest.raises(StoreError, match="another writer held"), waiter.transaction(write=True):
            pass
    with waiter.transaction(write=True) as tx:  # free again
        tx.append(event(2, prev="h1"))


# ── secrets and failures ───────────────────────────────────────────────────────────────────


def test_the_password_never_shows_in_the_location_or_in_errors(
    postgres_server: PostgresServer, database: str, open_store: OpenStore
) -> None:
    password, port = postgres_server.password, postgres_server.port
    secrets = (password, quote(password, safe=""))
    forms = [
        postgres_server.url(database),
        f"postgresql://{ROLE}@127.0.0.1:{port}/{database}?password={quote(password, safe='')}",
        f"host=127.0.0.1 port={port} dbname={database} user={ROLE} password='{password}'",
    ]
    for form in forms:
        location = open_store(url=form).location
        assert location == f"postgresql://{ROLE}@127.0.0.1:{port}/{database}"
    with open_ledger(forms[0]) as ledger:
        assert not any(s in ledger.location for s in secrets)

    wrong = postgres_server.url(database).replace(quote(password, safe=""), "not-the-password-42")
    with pytest.raises(LedgerError, match="password authentication failed") as failed:
        PostgresStore.open(wrong)
    assert "not-the-password-42" not in str(failed.value)
    with pytest.raises(LedgerError, match="malformed") as malformed:
        PostgresStore.open("host=127.0.0.1 password=hunter2 oops")
    assert "hunter2" not in str(malformed.value) and malformed.value.__cause__ is None


def test_a_killed_connection_fails_its_transaction_with_a_store_error(
    postgres_server: PostgresServer, database: str, open_store: OpenStore
) -> None:
    store = open_store()

    def write_across_a_kill() -> None:
        with store.transaction(write=True) as tx:
            tx.append(event(1))
            assert postgres_server.terminate_connections(database) == 1
            tx.append(event(2, prev="h1"))

    with pytest.raises(StoreError) as caught:
        write_across_a_kill()
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert not isinstance(caught.value, psycopg.Error)
    with store.transaction(write=False) as tx:  # on a new connection; nothing was committed
        assert tx.last_event() is None

    postgres_server.terminate_connections(database)  # while idle: the next transaction reconnects
    with store.transaction(write=True) as tx:
        tx.append(event(1))

    postgres_server.admin().execute(
        sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(sql.Identifier(database))
    )
    postgres_server.terminate_connections(database)
    with pytest.raises(StoreError, match="reconnecting") as refused, store.transaction(write=False):
        pass
    assert isinstance(refused.value.__cause__, psycopg.OperationalError)


def test_a_value_postgres_cannot_hold_is_a_store_error(open_store: OpenStore) -> None:
    store = open_store()
    with pytest.raises(StoreError), store.transaction(write=True) as tx:
        tx.insert("calls", call_row("c1", reason="a\x00b"))  # text cannot hold NUL
    with store.transaction(write=False) as tx:
        assert tx.row("calls", "c1") is None


def test_a_nested_transaction_is_refused(open_store: OpenStore) -> None:
    store = open_store()
    with (
        store.transaction(write=False),
        pytest.raises(StoreError, match="already open"),
        store.transaction(write=True),
    ):
        pass


# ── the schema, its guard rails and its settings ───────────────────────────────────────────


def test_events_are_append_only_and_a_removed_guard_rail_is_reported(
    open_store: OpenStore, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    store = open_store()
    with store.transaction(write=True) as tx:
        tx.append(event(1))
    for edit in ("UPDATE events SET kind = 'x'", "DELETE FROM events", "TRUNCATE events"):
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            raw.execute(edit)
    raw.execute("DROP INDEX calls_key_holder")
    raw.execute("ALTER TABLE events DISABLE TRIGGER events_no_truncate")
    with store.transaction(write=False) as tx:
        problems = tx.integrity_problems()
    assert len(problems) == 2
    assert "calls_key_holder" in problems[0] and "events_no_truncate" in problems[1]


def test_opening_refuses_foreign_tables_other_versions_and_other_encodings(
    postgres_server: PostgresServer,
    database: str,
    url: str,
    raw: psycopg.Connection[tuple[Any, ...]],
    open_store: OpenStore,
) -> None:
    with pytest.raises(LedgerError, match="no ledger in"):
        PostgresStore.open(url, create=False)
    raw.execute("CREATE TABLE runs (id INTEGER)")  # someone else's table in the same schema
    with pytest.raises(LedgerError, match=r"cannot create the ledger's tables.*already exists"):
        PostgresStore.open(url)
    raw.execute("DROP TABLE runs")
    open_store().close()
    raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(LedgerError, match="schema version 99"):
        PostgresStore.open(url)

    latin = f"{database}_latin1"
    postgres_server.admin().execute(
        sql.SQL(
            "CREATE DATABASE {} OWNER {} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        ).format(sql.Identifier(latin), sql.Identifier(ROLE))
    )
    try:
        with pytest.raises(LedgerError, match="needs a UTF8 database"):
            PostgresStore.open(postgres_server.url(latin))
    finally:
        postgres_server.drop_database(latin)


def test_commits_wait_for_the_wal_unless_asked_not_to(
    postgres_server: PostgresServer, database: str, open_store: OpenStore
) -> None:
    assert open_store().setting("synchronous_commit") == "on"
    assert open_store(synchronous="normal").setting("synchronous_commit") == "off"
    postgres_server.admin().execute(
        sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(database))
    )
    assert open_store().setting("synchronous_commit") == "on"  # a lax server default is raised
    store = open_store()
    with store.transaction(write=True, durable=False) as tx:
        tx.append(event(1))
    assert store.setting("synchronous_commit") == "on"  # durable=False was for that commit only


# ── open_ledger ────────────────────────────────────────────────────────────────────────────


def test_open_ledger_takes_a_postgres_url(
    postgres_server: PostgresServer, database: str, clock: Any, intent: Intent, binding: RunBinding
) -> None:
    with pytest.raises(LedgerError, match="no ledger in"):
        open_ledger(postgres_server.url(database), create=False)
    with open_ledger(postgres_server.url(database, scheme="postgres"), clock=clock) as ledger:
        store: object = ledger.store
        assert isinstance(store, PostgresStore)
        ledger.begin_run(binding, "sha256:code")
        fresh = ledger.reserve(intent(0, key="k"))
        assert isinstance(fresh, Fresh)
        ledger.mark_sent(fresh.call_id)
        ledger.complete(fresh.call_id, ToolResult(structured={"ok": True}), receipt="r-1")
        ledger.finish_run(binding.run_id, "ok")
        assert ledger.verify().ok
        head = ledger.head()
    with open_ledger(postgres_server.url(database), clock=clock, create=False) as other:  # another broker
        assert other.head() == head
        replay = other.reserve(intent(1, key="k"))
        assert isinstance(replay, Replay) and replay.outcome == ToolResult(structured={"ok": True})
        assert [c.call_id for c in other.find_by_receipt("r-1")] == [fresh.call_id]
        assert other.verify(anchor=head).ok


def test_without_psycopg_a_postgres_url_asks_for_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # makes `import psycopg` fail
    monkeypatch.delitem(sys.modules, "codemode.ledger.stores._postgres")
    with pytest.raises(LedgerError, match=r"pip install 'codemode\[postgres\]'"):
        open_ledger("postgresql://nobody@127.0.0.1:1/none")


def test_a_ledger_from_before_a_column_was_added_gains_it_on_open(
    url: str, clock: Any, intent: Intent, binding: RunBinding
) -> None:
    with open_ledger(url, clock=clock) as ledger:
        ledger.begin_run(binding, "sha256:code")
    with psycopg.connect(url, autocommit=True) as conn:  # as an earlier codemode created it
        conn.execute("ALTER TABLE calls DROP COLUMN tool_version, DROP COLUMN filter_json")
    with open_ledger(url, clock=clock, create=False) as ledger:
        fresh = ledger.reserve(intent(0, key="k", tool_version="2.0"))
        assert isinstance(fresh, Fresh)
        ledger.mark_sent(fresh.call_id)
        done = ledger.complete(fresh.call_id, ToolResult(), filtered={"secrets_redacted": 1})
        assert done.tool_version == "2.0" and done.filter_report == {"secrets_redacted": 1}
        assert ledger.verify().ok
