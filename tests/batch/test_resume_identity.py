"""A job is bound to the principal and tenant it started as: its idempotency keys are scoped to
them, so a resume as anyone else would send its completed writes again. It is refused instead."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from mcp.server.mcpserver import MCPServer

from codemode import CodeMode
from codemode.batch import (
    BatchError,
    BatchOptions,
    ItemResult,
    SqliteJobStore,
    StoredItem,
    prepare_job,
    run_on_workers,
)
from codemode.config import PolicyConfig
from tests.test_engine_in_memory import approved_in_memory_crm

from .conftest import MakeWorkspace

pytestmark = pytest.mark.anyio

WRITE_THEN_FAIL = """
from servers.crm import add_note
add_note(customer_id="C1", text="charge " + INPUT["id"])
raise RuntimeError("a later step failed")
"""

OLD_SCHEMA = """
CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    program_digest TEXT NOT NULL,
    inputs_digest TEXT,
    registered INTEGER NOT NULL DEFAULT 0,
    bad_lines TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE items (
    job_id TEXT NOT NULL,
    key TEXT NOT NULL,
    line INTEGER NOT NULL,
    data TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    run_id TEXT,
    result TEXT,
    error TEXT,
    calls INTEGER NOT NULL DEFAULT 0,
    duration_ms REAL NOT NULL DEFAULT 0,
    updated_at REAL,
    PRIMARY KEY (job_id, key)
);
"""


def crm(writes: list[str]) -> MCPServer:
    app = MCPServer("crm", version="1.0.0")

    @app.tool()
    def add_note(customer_id: str, text: str) -> dict[str, bool]:
        """Add a note."""
        writes.append(text)
        return {"ok": True}

    return app


ITEMS = [{"id": "a"}, {"id": "b"}]


def test_a_resume_as_another_principal_or_tenant_is_refused_and_says_how_to_resume(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    policy = PolicyConfig()
    prepare_job(store, "INPUT", ITEMS, BatchOptions(job_id="j", key="id", principal="alice"), policy)
    job = store.job("j")
    assert job is not None and (job.principal, job.tenant) == ("alice", "default")
    for other in (
        BatchOptions(principal="bob"),
        BatchOptions(),
        BatchOptions(principal="alice", tenant="t2"),
    ):
        options = BatchOptions(
            job_id="j", key="id", resume=True, principal=other.principal, tenant=other.tenant
        )
        with pytest.raises(BatchError, match="started as principal 'alice' in tenant 'default'") as raised:
            prepare_job(store, "INPUT", ITEMS, options, policy)
        assert "--principal alice --tenant default" in str(raised.value)
    same = BatchOptions(job_id="j", key="id", resume=True, principal="alice", tenant="default")
    assert prepare_job(store, "INPUT", ITEMS, same, policy).resumed


async def test_workers_refuse_a_job_prepared_without_a_policy(tmp_path: Path) -> None:
    """Fail closed: without a policy nobody checked who the job runs as, so no item may run."""
    ran: list[str] = []

    class Worker:
        async def run(self, item: StoredItem, attempt: int) -> ItemResult:
            ran.append(item.key)
            return ItemResult(item.key, item.line, "done", attempt, "run_x", result=None)

    options = BatchOptions(job_id="j", key="id")
    job = prepare_job(SqliteJobStore(tmp_path / "jobs.db"), "INPUT", ITEMS, options)
    with pytest.raises(BatchError, match="prepared without a policy"):
        async for _ in run_on_workers([Worker()], job, options):
            pass
    assert ran == []


async def test_workers_refuse_to_run_a_job_as_another_principal_than_it_was_prepared_as(
    tmp_path: Path,
) -> None:
    ran: list[str] = []

    class Worker:
        async def run(self, item: StoredItem, attempt: int) -> ItemResult:
            ran.append(item.key)
            return ItemResult(item.key, item.line, "done", attempt, "run_x", result=None)

    store = SqliteJobStore(tmp_path / "jobs.db")
    alice = BatchOptions(job_id="j", key="id", principal="alice")
    job = prepare_job(store, "INPUT", ITEMS, alice, PolicyConfig())
    bob = BatchOptions(job_id="j", key="id", principal="bob")
    with pytest.raises(BatchError, match="the options ask for \\('bob', 'default'\\)"):
        async for _ in run_on_workers([Worker()], job, bob):
            pass
    forged = replace(job, identity=("mallory", "default"))  # a BatchJob built by hand
    with pytest.raises(BatchError, match="its record says \\('alice', 'default'\\)"):
        async for _ in run_on_workers(
            [Worker()], forged, BatchOptions(job_id="j", key="id", principal="mallory")
        ):
            pass
    assert ran == []
    async for _ in run_on_workers([Worker()], job, alice):
        pass
    assert sorted(ran) == ["a", "b"]


def test_the_default_principal_is_recorded_too(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    prepare_job(store, "INPUT", ITEMS, BatchOptions(job_id="j", key="id"), PolicyConfig())
    moved = PolicyConfig(default_principal="ops")  # the config's default changed since the job started
    with pytest.raises(BatchError, match="principal 'local'"):
        prepare_job(store, "INPUT", ITEMS, BatchOptions(job_id="j", key="id"), moved)


@pytest.mark.integration
async def test_engine_batch_refuses_a_resume_as_another_principal_and_sends_no_write_twice(
    tmp_path: Path,
) -> None:
    writes: list[str] = []
    config, transports = await approved_in_memory_crm(
        tmp_path, crm(writes), policy={"consent": {"never": ["crm/add_note"]}}
    )
    first = BatchOptions(job_id="J", key="id", concurrency=1, max_attempts=1, principal="alice")
    async with CodeMode(config, transports=transports) as engine:
        results = [r async for r in engine.batch(WRITE_THEN_FAIL, [{"id": "x"}], first)]
    assert [r.status for r in results] == ["failed"] and writes == ["charge x"]
    resume = BatchOptions(job_id="J", key="id", concurrency=1, max_attempts=3, resume=True)
    refused = pytest.RaisesExc(BatchError, match="--principal alice")
    # The engine's task group may wrap it.
    with pytest.RaisesGroup(refused, allow_unwrapped=True, flatten_subgroups=True):
        async with CodeMode(config, transports=transports) as engine:
            async for _ in engine.batch(WRITE_THEN_FAIL, [{"id": "x"}], resume):
                pass
    assert writes == ["charge x"], "the completed write was not sent again"
    as_alice = BatchOptions(
        job_id="J", key="id", concurrency=1, max_attempts=2, resume=True, principal="alice"
    )
    async with CodeMode(config, transports=transports) as engine:
        again = [r async for r in engine.batch(WRITE_THEN_FAIL, [{"id": "x"}], as_alice)]
    assert [(r.status, r.attempts) for r in again] == [("failed", 2)]
    assert writes == ["charge x"], "as the same principal the write replays"


def test_a_job_store_of_an_older_version_opens_and_its_jobs_are_bound_on_their_first_resume(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_SCHEMA)
    old = SqliteJobStore(path)
    prepare_job(old, "INPUT", ITEMS, BatchOptions(job_id="old", key="id"))  # as an older version did
    old.close()
    store = SqliteJobStore(path)
    job = store.job("old")
    assert job is not None and job.registered and job.principal is None
    policy = PolicyConfig()
    resume = BatchOptions(job_id="old", key="id", resume=True)
    assert prepare_job(store, "INPUT", ITEMS, resume, policy).resumed
    with pytest.raises(BatchError, match="started as principal 'local'"):
        prepare_job(store, "INPUT", ITEMS, BatchOptions(job_id="old", key="id", principal="bob"), policy)


@pytest.mark.integration
def test_the_cli_refuses_a_resume_as_another_principal(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace()
    args = ["batch", str(ws.program()), "--inputs", str(ws.items(1)), "--key", "id", "--job-id", "who"]
    first = ws.cli(*args, "--principal", "alice")
    assert first.returncode == 0, first.stderr
    resumed = ws.cli(*args, "--resume")
    assert resumed.returncode == 2
    assert "--principal alice --tenant default" in " ".join(resumed.stderr.split())
    assert ws.crm_writes() == ["batch note item-0000"]
