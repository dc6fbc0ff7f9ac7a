"""Shared pieces for the ledger tests: a movable clock, intents, and a ledger on a temp file."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from codemode.calls import RunBinding
from codemode.ledger import CallIntent, SqliteLedger, open_ledger
from codemode.testing import FakeClock
from tests.ledger._pg import PostgresServer

BINDING = RunBinding(run_id="run-1", principal="alice", tenant="acme", trace_id="trace-1")
DEAD_OWNER = f"{socket.gethostname()}:4194999:0.00:deadbeef"
"""An owner on this host whose process cannot exist (pid above pid_max, wrong start time)."""


def make_intent(seq: int = 0, *, key: str | None = "k1", **changes: Any) -> CallIntent:
    base: dict[str, Any] = {
        "call_id": f"{BINDING.run_id}/{seq}",
        "run_id": BINDING.run_id,
        "trace_id": BINDING.trace_id,
        "principal": BINDING.principal,
        "tenant": BINDING.tenant,
        "server": "crm",
        "tool": "add_note",
        "schema_hash": "sha256:" + "ab" * 32,
        "arguments": {"customer_id": 42, "text": "hello"},
        "idempotency_key": key,
    }
    base.update(changes)
    return CallIntent(**base)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 1, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "codemode.db"


@pytest.fixture
def open_at(db_path: Path, clock: FakeClock) -> Iterator[Callable[..., SqliteLedger]]:
    opened: list[SqliteLedger] = []

    def make(**options: Any) -> SqliteLedger:
        options.setdefault("clock", clock)
        ledger = open_ledger(options.pop("path", db_path), **options)
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


@pytest.fixture
def ledger(open_at: Callable[..., SqliteLedger]) -> SqliteLedger:
    return open_at()


IntentFactory = Callable[..., CallIntent]


@pytest.fixture
def intent() -> IntentFactory:
    """``intent(seq=0, key="k1", **field_changes)`` builds a CallIntent for run-1."""
    return make_intent


@pytest.fixture
def binding() -> RunBinding:
    return BINDING


@pytest.fixture
def dead_owner() -> str:
    return DEAD_OWNER


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A database of its own on the session's PostgreSQL server, dropped afterwards."""
    name = postgres_server.new_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)
