"""Two replicas (two workspace stores, each on its own connection to one PostgreSQL ledger, one
shared directory) see the same workspaces, keep each other's alive and prune each once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from codemode.ledger import open_ledger
from codemode.workspace import Quota, WorkspaceKey, WorkspaceStore

pytestmark = pytest.mark.postgres

ALICE = WorkspaceKey("acme", "alice")
BOB = WorkspaceKey("acme", "bob", "ses_1")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def replicas(
    postgres_url: str, tmp_path: Path, clock: Clock
) -> Iterator[tuple[WorkspaceStore, WorkspaceStore]]:
    with ExitStack() as stack:
        stores = [
            WorkspaceStore(
                tmp_path / "shared",
                index=stack.enter_context(open_ledger(postgres_url)).workspaces,
                quota=Quota(bytes=1000, files=10),
                ttl_s=100.0,
                clock=clock,
            )
            for _ in range(2)
        ]
        yield stores[0], stores[1]


def test_replicas_list_the_same_workspaces(replicas: tuple[WorkspaceStore, WorkspaceStore]) -> None:
    one, two = replicas
    one.commit(ALICE, {"a.txt": b"1"})
    two.commit(BOB, {"b.txt": b"22", "c/d": b"333"})
    for replica in (one, two):
        listed = {(info.key, info.files, info.bytes) for info in replica.workspaces()}
        assert listed == {(ALICE, 1, 1), (BOB, 2, 5)}
    assert two.load(ALICE) == {"a.txt": b"1"}
    assert one.read(BOB, "c/d") == b"333"


def test_a_use_on_one_replica_keeps_it_alive_on_the_other_and_each_goes_once(
    replicas: tuple[WorkspaceStore, WorkspaceStore], clock: Clock
) -> None:
    one, two = replicas
    one.commit(ALICE, {"a.txt": b"1"})
    one.commit(BOB, {"b.txt": b"2"})
    clock.now += 60
    two.load(ALICE)  # alice used 50 s before the prune, bob 110 s (ttl 100 s)
    clock.now += 50
    gone = [info.key for replica in (one, two) for info in replica.prune()]
    assert gone == [BOB], "pruned once, by one replica, and alice stays"
    for replica in (one, two):
        assert [info.key for info in replica.workspaces()] == [ALICE]
        assert replica.load(BOB, touch=False) == {}
    assert one.load(ALICE) == {"a.txt": b"1"}
