"""The store contract suite: every test here runs once per entry of :data:`STORE_MAKERS`.

A backend plugs in by adding a :class:`StoreMaker` whose ``new`` creates a fresh, empty store
for one test (a new file, a new database) and returns a function that opens another client of
it (a new connection: the concurrency tests open several). PostgreSQL runs on a throwaway
server (``tests/ledger/_pg.py``); its tests are marked ``postgres``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codemode.ledger import LedgerStore, SqliteStore, StoreLedger
from codemode.ledger._owner import new_owner
from tests.ledger._pg import PostgresServer

OpenClient = Callable[[], LedgerStore]
CREATED_AT = "2026-01-01T00:00:00.000000Z"


@dataclass(frozen=True)
class StoreMaker:
    name: str
    new: Callable[[Path, pytest.FixtureRequest], OpenClient]
    """Given an empty temporary directory and the test's request (to reach session fixtures such
    as a database server): a function that opens a new client of one new store."""
    marks: tuple[pytest.MarkDecorator, ...] = ()


def _sqlite(tmp: Path, request: pytest.FixtureRequest) -> OpenClient:
    path = tmp / "contract.db"
    return lambda: SqliteStore.open(path, created_at=lambda: CREATED_AT)


def _postgres(tmp: Path, request: pytest.FixtureRequest) -> OpenClient:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    from codemode.ledger.stores import PostgresStore  # psycopg: only for this maker

    name = server.new_database()
    # Runs after the clients are closed: the `connect` fixture's own teardown is registered later.
    request.addfinalizer(lambda: server.drop_database(name))
    url = server.url(name)
    return lambda: PostgresStore.open(url, created_at=lambda: CREATED_AT)


STORE_MAKERS: list[StoreMaker] = [
    StoreMaker("sqlite", _sqlite),
    StoreMaker("postgres", _postgres, marks=(pytest.mark.postgres,)),
]


@pytest.fixture(params=[pytest.param(maker, id=maker.name, marks=maker.marks) for maker in STORE_MAKERS])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenClient]:
    """Opens clients of one fresh store; all are closed after the test."""
    maker: StoreMaker = request.param
    factory = maker.new(tmp_path, request)
    opened: list[LedgerStore] = []

    def open_client() -> LedgerStore:
        store = factory()
        opened.append(store)
        return store

    yield open_client
    for store in opened:
        store.close()


@pytest.fixture
def store(connect: OpenClient) -> LedgerStore:
    return connect()


MakeLedger = Callable[..., StoreLedger]


@pytest.fixture
def make_ledger(connect: OpenClient, clock: Any) -> MakeLedger:
    """``make_ledger(store=None, owner=None, **options)``: a ledger on a (new) client of the store."""

    def make(store: LedgerStore | None = None, *, owner: str | None = None, **options: Any) -> StoreLedger:
        return StoreLedger(store or connect(), clock=clock, owner=owner or new_owner(), **options)

    return make


@pytest.fixture
def ledger(make_ledger: MakeLedger) -> StoreLedger:
    return make_ledger()
