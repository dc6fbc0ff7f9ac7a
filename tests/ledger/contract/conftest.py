"""The store contract suite: every test here runs once per entry of :data:`STORE_MAKERS`.

A second backend (PostgreSQL, say) plugs in by adding a :class:`StoreMaker` whose ``new``
creates a fresh, empty store for one test (a new database or schema) and returns a function
that opens another client of it (a new connection: the concurrency tests open several).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codemode.ledger import LedgerStore, SqliteStore, StoreLedger
from codemode.ledger._owner import new_owner

OpenClient = Callable[[], LedgerStore]


@dataclass(frozen=True)
class StoreMaker:
    name: str
    new: Callable[[Path], OpenClient]
    """Given an empty temporary directory: a function that opens a new client of one new store."""


def _sqlite(tmp: Path) -> OpenClient:
    path = tmp / "contract.db"
    return lambda: SqliteStore.open(path, created_at=lambda: "2026-01-01T00:00:00.000000Z")


STORE_MAKERS: list[StoreMaker] = [StoreMaker("sqlite", _sqlite)]


@pytest.fixture(params=STORE_MAKERS, ids=[maker.name for maker in STORE_MAKERS])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenClient]:
    """Opens clients of one fresh store; all are closed after the test."""
    maker: StoreMaker = request.param
    factory = maker.new(tmp_path)
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
