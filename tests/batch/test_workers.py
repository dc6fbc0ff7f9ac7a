"""Worker slots: the dispatch loop over any workers, and the remote worker that Ray wraps.

The remote worker runs here in one process (no Ray): it builds its engine from what the driver
sends, resolves secrets from its own environment, and refuses to run items when its live tools
differ from the driver's pins. ``tests/batch/test_ray.py`` runs the same worker in Ray actors.
"""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from codemode.batch import (
    BatchError,
    BatchJob,
    BatchOptions,
    ItemResult,
    RemoteWorker,
    SqliteJobStore,
    StoredItem,
    WorkerLost,
    WorkerRefused,
    WorkerSpec,
    _dispatch,
    prepare_job,
    run_on_workers,
)
from codemode.batch._ray import import_ray, ray_workers
from codemode.config import PolicyConfig, load_config

from .conftest import MakeWorkspace, Workspace

pytestmark = pytest.mark.anyio

DRIFTING = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "drifting_server.py"
ITEMS = [{"id": f"i{n}", "customer": "CUST-0001"} for n in range(6)]


class FlakyWorker:
    """Loses its first item's worker once, then runs everything."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    async def run(self, item: StoredItem, attempt: int) -> ItemResult:
        self.calls.append((item.key, attempt))
        if len(self.calls) == 1:
            raise WorkerLost("its worker was lost mid-item (ActorDiedError)")
        return ItemResult(item.key, item.line, "done", attempt, f"run_{item.key}", result=item.data["id"])


class RefusingWorker:
    async def run(self, item: StoredItem, attempt: int) -> ItemResult:
        raise WorkerRefused("the worker on node-b refuses to run items: drifting/echo (changed)")


def job_of(tmp_path: Path, options: BatchOptions) -> BatchJob:
    return prepare_job(SqliteJobStore(tmp_path / "jobs.db"), "INPUT", ITEMS, options, PolicyConfig())


async def collect(results: AsyncIterator[ItemResult]) -> list[ItemResult]:
    return [result async for result in results]


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dispatch, "PAUSE_S", (0.0, 0.0))


async def test_an_item_whose_worker_was_lost_runs_again_and_the_job_completes(tmp_path: Path) -> None:
    options = BatchOptions(job_id="lost", key="id", concurrency=2, max_attempts=3)
    job = job_of(tmp_path, options)
    workers = [FlakyWorker(), FlakyWorker()]
    results = await collect(run_on_workers(workers, job, options))
    assert sorted(r.key for r in results) == [f"i{n}" for n in range(6)]
    assert {(r.status, r.attempts) for r in results} == {("done", 1)}, "a lost worker costs no attempt"
    for worker in workers:
        first = worker.calls[0]
        assert worker.calls.count(first) == 2, "the lost item ran again, same attempt"
    assert job.store.counts("lost") == {"done": 6}


async def test_a_worker_lost_on_every_attempt_fails_its_item_with_the_reason(tmp_path: Path) -> None:
    class AlwaysLost:
        async def run(self, item: StoredItem, attempt: int) -> ItemResult:
            raise WorkerLost("its worker was lost mid-item (ActorDiedError)")

    options = BatchOptions(job_id="doomed", key="id", concurrency=1, max_attempts=2)
    results = await collect(run_on_workers([AlwaysLost()], job_of(tmp_path, options), options))
    assert {(r.status, r.attempts) for r in results} == {("failed", 2)}
    assert all(f"lost {_dispatch.MAX_WORKER_LOSSES} times" in (r.error or "") for r in results)


async def test_a_refusing_worker_stops_the_job_with_its_own_message(tmp_path: Path) -> None:
    options = BatchOptions(job_id="refused", key="id", concurrency=1)
    job = job_of(tmp_path, options)
    with pytest.raises(WorkerRefused, match="node-b refuses to run items"):
        await collect(run_on_workers([RefusingWorker()], job, options))
    assert "done" not in job.store.counts("refused")


def drifting_workspace(make_workspace: MakeWorkspace, env_value: str) -> Workspace:
    server = (
        f"\n[servers.drifting]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(DRIFTING))}]\n"
        f'env = {{ FIXTURE_VARIANT = "{env_value}" }}\n'
    )
    return make_workspace(extra=server)


def spec_for(ws: Workspace, program: str = "INPUT['id']") -> WorkerSpec:
    return WorkerSpec.build(load_config(ws.config), program, "job-1", BatchOptions(key="id"))


@pytest.mark.integration
async def test_a_remote_worker_runs_items_through_its_own_engine(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace()
    worker = RemoteWorker(spec_for(ws, ws.program().read_text(encoding="utf-8")), where="node-a")
    try:
        assert await worker.start() == "node-a"
        item = StoredItem("i1", 1, {"id": "i1", "customer": "CUST-0001"}, "running", 1)
        first = await worker.run(item, 1)
        again = await worker.run(item, 2)
    finally:
        await worker.close()
    assert first.status == again.status == "done", (first.error, again.error)
    assert first.result == again.result, "the second run replayed the recorded write"
    assert ws.crm_writes() == ["batch note i1"], "one write for two runs of the item"


@pytest.mark.integration
async def test_a_worker_whose_live_tools_differ_from_the_pins_refuses(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODE_VARIANT", "base")
    ws = drifting_workspace(make_workspace, "${NODE_VARIANT}")  # pinned as 'base' by sync here
    monkeypatch.setenv("NODE_VARIANT", "description")  # this "node" runs a changed server
    worker = RemoteWorker(spec_for(ws), where="node-b")
    with pytest.raises(WorkerRefused, match=r"node-b refuses to run items.*drifting/echo \(changed\)"):
        await worker.run(StoredItem("i1", 1, {"id": "i1"}, "running", 1), 1)
    assert ws.crm_writes() == []


@pytest.mark.integration
async def test_a_secret_missing_on_the_node_is_an_error_that_names_it_and_the_node(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONLY_ON_THE_DRIVER", "base")
    ws = drifting_workspace(make_workspace, "${ONLY_ON_THE_DRIVER}")
    monkeypatch.delenv("ONLY_ON_THE_DRIVER")
    with pytest.raises(WorkerRefused, match="node-c") as raised:
        await RemoteWorker(spec_for(ws), where="node-c").start()
    assert "ONLY_ON_THE_DRIVER" in str(raised.value)


@pytest.mark.integration
def test_what_travels_to_workers_holds_references_never_secret_values(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TOKEN", "tok-0123456789abcdef")
    ws = make_workspace()
    text = ws.config.read_text(encoding="utf-8").replace("env = { ", 'env = { API = "${API_TOKEN}", ', 1)
    ws.config.write_text(text, encoding="utf-8")
    config = load_config(ws.config)
    spec = WorkerSpec.build(config, "INPUT", "job", BatchOptions())
    sent = pickle.dumps(spec)
    assert b"${API_TOKEN}" in sent
    assert b"tok-0123456789abcdef" not in sent
    assert spec.lock_text == ws.config.with_name("codemode.lock").read_text(encoding="utf-8")


@pytest.mark.integration
def test_a_job_without_a_lock_file_is_refused_before_any_worker_starts(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace()
    ws.config.with_name("codemode.lock").unlink()
    with pytest.raises(BatchError, match="codemode sync"):
        spec_for(ws)


@pytest.mark.integration
async def test_the_ray_engine_needs_a_ledger_that_every_node_reaches(make_workspace: MakeWorkspace) -> None:
    config = load_config(make_workspace().config)
    with pytest.raises(BatchError, match=r"\[ledger\] url"):
        async with ray_workers(config, "INPUT", "job", BatchOptions(), address=None):
            pass


def test_without_ray_installed_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(BatchError, match=r"pip install 'codemode\[ray\]'"):
        import_ray()


@pytest.mark.integration
def test_the_cli_refuses_the_ray_engine_on_a_sqlite_ledger(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace()
    run = ws.cli("batch", str(ws.program()), "--inputs", str(ws.items(3)), "--engine", "ray")
    assert run.returncode == 2
    assert '[ledger] url = "postgresql://' in run.stderr
