"""The one batch driver: ``codemode batch`` and ``CodeMode.batch`` prepare, size and run a job
the same way (``codemode.batch.run_batch``)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

import codemode
from codemode import CodeMode
from codemode.batch import (
    BatchError,
    BatchOptions,
    ItemResult,
    Workers,
    open_job_store,
    run_batch,
    sized_for,
)
from codemode.config import config_from_mapping, load_config
from codemode.engine import CodeMode as Engine
from tests.test_engine_in_memory import approved_in_memory_crm

from .conftest import MakeWorkspace

pytestmark = pytest.mark.anyio

PROGRAM = "INPUT['id']"
ITEMS = [{"id": f"i{n}"} for n in range(6)]


def test_the_public_codemode_is_the_engine_with_batch(tmp_path: Path) -> None:
    config = tmp_path / "codemode.toml"
    config.write_text("", encoding="utf-8")
    made = CodeMode.from_file(config)
    assert isinstance(made, codemode.CodeMode) and isinstance(made, Engine)
    assert callable(made.batch)
    assert not hasattr(Engine, "batch"), "the engine must know nothing of batch"


@pytest.mark.parametrize(
    ("pool_size", "max_sessions", "concurrency", "expected"),
    [(1, 1, 3, (3, 3)), (5, 10, 3, (5, 10)), (0, 0, 1, (1, 1)), (2, 8, 8, (8, 8))],
)
def test_a_job_gets_a_warm_sandbox_and_a_session_per_concurrent_item_and_never_fewer_than_configured(
    tmp_path: Path, pool_size: int, max_sessions: int, concurrency: int, expected: tuple[int, int]
) -> None:
    config = config_from_mapping(
        {"sandbox": {"pool_size": pool_size}, "serve": {"max_sessions": max_sessions}}, base_dir=tmp_path
    )
    sized = sized_for(config, concurrency)
    assert (sized.sandbox.pool_size, sized.serve.max_sessions) == expected
    assert (sized.source, sized.base_dir) == (config.source, config.base_dir)


@pytest.mark.integration
async def test_the_api_and_the_cli_size_the_engine_they_start_and_share_the_job(
    make_workspace: MakeWorkspace,
) -> None:
    # One session at most and one warm sandbox: three items at once fit only if the driver
    # sizes the engine it starts, from the command line and from Python alike.
    ws = make_workspace(extra="[serve]\nmax_sessions = 1\n")
    program = ws.program(PROGRAM)
    items = ws.items(4)
    options = BatchOptions(key="id", concurrency=3)
    async with run_batch(load_config(ws.config), PROGRAM, items, options) as run:
        assert not run.job.resumed
        results = [result async for result in run.results()]
    assert sorted((r.key, r.status, r.result) for r in results) == [
        (f"item-{n:04d}", "done", f"item-{n:04d}") for n in range(4)
    ]
    fresh = ws.cli(
        "batch", str(program), "--inputs", str(ws.items(3, "more.jsonl")), "--key", "id",
        "--concurrency", "3", "--json",
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout)["counts"]["done"] == 3
    # The job the API started is the one the command names: the same command resumes it.
    again = ws.cli("batch", str(program), "--inputs", str(items), "--key", "id", "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["job_id"], summary["resumed"], summary["ran_now"]) == (run.job.job_id, True, 0)


@pytest.mark.integration
async def test_a_running_engine_is_not_resized_and_a_concurrency_it_cannot_hold_registers_nothing(
    tmp_path: Path,
) -> None:
    config, transports = await approved_in_memory_crm(tmp_path, serve={"max_sessions": 1})
    async with CodeMode(config, transports=transports) as engine:
        for concurrency in (2, 5):
            too_many = BatchOptions(job_id="j", concurrency=concurrency)
            with pytest.raises(BatchError, match=r"raise \[serve\] max_sessions \(now 1\)"):
                async for _ in engine.batch(PROGRAM, ITEMS, too_many):
                    pass
        store = open_job_store(config.ledger_path)
        try:
            assert store.job("j") is None, "the refused job was registered"
        finally:
            store.close()
        done = [r.status async for r in engine.batch(PROGRAM, ITEMS, BatchOptions(job_id="j", concurrency=1))]
    assert done == ["done"] * len(ITEMS)


@pytest.mark.integration
@pytest.mark.parametrize(("configured", "workers"), [("ray", None), ("local", "ray")])
async def test_cm_batch_offers_ray_as_the_cli_does(
    tmp_path: Path, configured: str, workers: Workers | None
) -> None:
    config, transports = await approved_in_memory_crm(tmp_path, batch={"engine": configured})
    async with CodeMode(config, transports=transports) as engine:
        # Ray workers need a ledger that every node reaches: the same refusal as the CLI's.
        with pytest.raises(BatchError, match=r'\[ledger\] url = "postgresql://'):
            async for _ in engine.batch(PROGRAM, ITEMS, workers=workers):
                pass


@pytest.mark.integration
async def test_local_workers_chosen_in_the_call_win_over_the_configured_ray(tmp_path: Path) -> None:
    config, transports = await approved_in_memory_crm(tmp_path, batch={"engine": "ray"})
    async with CodeMode(config, transports=transports) as engine:
        done = [r.status async for r in engine.batch(PROGRAM, ITEMS[:2], workers="local")]
    assert done == ["done", "done"]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "text"),
    [("items.jsonl", '{"id": "a"}\n{"id": "b"}\n'), ("items.csv", "id,note\na,x\nb,y\n")],
)
async def test_an_items_path_given_as_text_is_read_as_the_file(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    config, transports = await approved_in_memory_crm(tmp_path)
    async with CodeMode(config, transports=transports) as engine:
        results = [r async for r in engine.batch(PROGRAM, str(path), BatchOptions(key="id", concurrency=1))]
    assert sorted((r.key, r.status, r.result) for r in results) == [("a", "done", "a"), ("b", "done", "b")]


def sessions_of(engine: Engine) -> int:
    sandboxes = engine._sandboxes  # pyright: ignore[reportPrivateUsage]
    assert sandboxes is not None
    return len(sandboxes.sessions)


@pytest.mark.integration
async def test_a_job_on_a_running_engine_leaves_no_session_behind_even_when_its_reader_stops_early(
    tmp_path: Path,
) -> None:
    config, transports = await approved_in_memory_crm(tmp_path)
    options = BatchOptions(job_id="early", key="id", concurrency=2)
    async with CodeMode(config, transports=transports) as engine:
        first: list[ItemResult] = []
        async with contextlib.aclosing(engine.batch(PROGRAM, ITEMS, options)) as results:
            async for result in results:
                first.append(result)
                break
        assert sessions_of(engine) == 0, "the job's sandbox sessions outlived it"
        resumed = BatchOptions(job_id="early", key="id", concurrency=2, resume=True)
        rest = [r async for r in engine.batch(PROGRAM, ITEMS, resumed)]
        assert sessions_of(engine) == 0
        assert (await engine.run("1 + 1")).result == 2  # the engine is still fine
    assert len(first) == 1 and {r.status for r in first + rest} == {"done"}
    store = open_job_store(config.ledger_path)
    try:
        assert store.counts("early") == {"done": len(ITEMS)}
    finally:
        store.close()
