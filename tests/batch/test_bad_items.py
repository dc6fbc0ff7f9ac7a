"""Items that could never run are bad lines before anything runs (NaN and infinities, values JSON
cannot hold, keys too long for an idempotency key); an item that fails to run anyway fails alone,
while a failure of codemode's own machinery still stops the job."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from codemode import CodeMode
from codemode.batch import (
    BadLine,
    BatchError,
    BatchOptions,
    Item,
    ItemResult,
    SqliteJobStore,
    StoredItem,
    _dispatch,
    open_job_store,
    prepare_job,
    read_items,
    run_on_workers,
)
from codemode.batch import _runner as runner
from codemode.batch._inputs import MAX_KEY_CHARS
from codemode.config import PolicyConfig
from codemode.ledger import StoreError
from tests.test_engine_in_memory import approved_in_memory_crm

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dispatch, "PAUSE_S", (0.0, 0.0))


def test_nan_and_infinite_numbers_make_a_jsonl_line_bad(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    rows = ['{"id": "a"}', '{"id": "b", "x": NaN}', '{"id": "c", "x": [Infinity]}']
    rows += ['{"id": "d", "x": -Infinity}', '{"id": "e", "x": 1e999}', '{"id": "f", "x": 1.5e3}']
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    found = list(read_items(path, "id"))
    assert [e.key for e in found if isinstance(e, Item)] == ["a", "f"]
    bad = [e for e in found if isinstance(e, BadLine)]
    assert [b.line for b in bad] == [2, 3, 4, 5]
    assert all(b.reason.startswith("not valid JSON") for b in bad)


def test_strict_refuses_a_nan_line_and_the_default_skips_it(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n{"id": 2, "score": NaN}\n{"id": 3}\n', encoding="utf-8")
    store = SqliteJobStore(tmp_path / "jobs.db")
    with pytest.raises(BatchError, match="input line 2: not valid JSON"):
        prepare_job(store, "INPUT", path, BatchOptions(job_id="s", key="id", strict=True))
    job = prepare_job(store, "INPUT", path, BatchOptions(job_id="t", key="id"))
    assert [b["line"] for b in job.bad_lines] == [2]
    assert store.counts("t") == {"pending": 2}


def test_api_items_that_json_cannot_hold_are_bad_lines(tmp_path: Path) -> None:
    items: list[dict[str, Any]] = [
        {"id": "a"},
        {"id": "b", "x": math.nan},
        {"id": "c", "x": object()},
        {"id": "d", "x": {"y": math.inf}},
        {"id": "e"},
    ]
    store = SqliteJobStore(tmp_path / "jobs.db")
    with pytest.raises(BatchError, match="input line 2: not valid JSON"):
        prepare_job(store, "INPUT", items, BatchOptions(job_id="j", key="id", strict=True))
    job = prepare_job(store, "INPUT", items, BatchOptions(job_id="j", key="id"))
    assert [b["line"] for b in job.bad_lines] == [2, 3, 4]
    assert [i.key for i in store.items("j")] == ["a", "e"]


def test_an_item_key_is_limited_by_its_length_inside_an_idempotency_key(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    keys = ["x" * MAX_KEY_CHARS, "x" * (MAX_KEY_CHARS + 1), "%" * (MAX_KEY_CHARS // 3 + 1), "urn:" * 120]
    path.write_text("".join(f'{{"id": "{key}"}}\n' for key in keys), encoding="utf-8")
    found = list(read_items(path, "id"))
    assert [e.line for e in found if isinstance(e, Item)] == [1]
    bad = [e for e in found if isinstance(e, BadLine)]
    assert [b.line for b in bad] == [2, 3, 4]
    assert f"more than {MAX_KEY_CHARS}" in bad[0].reason
    assert "each ':' and '%' counts 3" in bad[1].reason


def test_an_api_item_key_is_limited_too(tmp_path: Path) -> None:
    items = [{"k": "x" * 1000}, {"k": "a:b" * 110}, {"k": "short"}]
    store = SqliteJobStore(tmp_path / "jobs.db")
    with pytest.raises(
        BatchError, match=f"input line 1: the 'k' field is 1000 characters long, more than {MAX_KEY_CHARS}"
    ):
        prepare_job(store, "INPUT", items, BatchOptions(job_id="s", key="k", strict=True))
    job = prepare_job(store, "INPUT", items, BatchOptions(job_id="j", key="k"))
    assert [b["line"] for b in job.bad_lines] == [1, 2]
    assert [i.key for i in store.items("j")] == ["short"]


class TroubledWorker:
    """Cannot run item ``b`` (a value the channel refuses); the ledger breaks at item ``d``."""

    async def run(self, item: StoredItem, attempt: int) -> ItemResult:
        if item.key == "b":
            raise ExceptionGroup("in the sandbox", [ValueError("Out of range float values")])
        if item.key == "d":
            raise ExceptionGroup("in the run", [StoreError("the ledger file is damaged")])
        return ItemResult(item.key, item.line, "done", attempt, f"run_{item.key}", result=item.key)


async def test_an_item_that_cannot_run_fails_alone_but_a_ledger_failure_stops_the_job(tmp_path: Path) -> None:
    options = BatchOptions(job_id="j", key="id", concurrency=1, max_attempts=2)
    items = [{"id": key} for key in "abcde"]
    job = prepare_job(SqliteJobStore(tmp_path / "jobs.db"), "INPUT", items, options, PolicyConfig())
    seen: list[ItemResult] = []
    with pytest.RaisesGroup(StoreError, flatten_subgroups=True):
        async for result in run_on_workers([TroubledWorker()], job, options):
            seen.append(result)
    assert [(r.key, r.status, r.attempts) for r in seen] == [
        ("a", "done", 1),
        ("b", "failed", 2),
        ("c", "done", 1),
    ]
    assert seen[1].error == "the item could not run: ValueError: Out of range float values"
    states = {i.key: i.status for i in job.store.items("j")}
    assert states == {"a": "done", "b": "failed", "c": "done", "d": "running", "e": "pending"}


@pytest.mark.integration
async def test_a_stored_nan_item_fails_and_the_rest_of_the_job_runs(tmp_path: Path) -> None:
    config, transports = await approved_in_memory_crm(tmp_path)
    program = 'INPUT["id"]'
    items = [{"id": "a"}, {"id": "b", "score": math.nan}, {"id": "c"}]
    store = open_job_store(config.ledger_path)
    try:  # registered the way an older version did, which let NaN through
        store.begin_registration("nan", runner.program_digest(program, None))
        store.register("nan", ((str(item["id"]), line, item) for line, item in enumerate(items, start=1)))
        store.finish_registration("nan", "", [])
    finally:
        store.close()
    options = BatchOptions(job_id="nan", key="id", concurrency=1, max_attempts=1, resume=True)
    async with CodeMode(config, transports=transports) as engine:
        results = {r.key: r async for r in engine.batch(program, items, options)}
    assert {key: r.status for key, r in results.items()} == {"a": "done", "b": "failed", "c": "done"}
    assert (results["b"].error or "").startswith("the item could not run: ValueError")
    assert results["c"].result == "c"
