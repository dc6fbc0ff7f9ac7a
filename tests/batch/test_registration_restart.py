"""A registration cut short (it commits a page of items at a time) starts over on the next try:
no page of the earlier attempt stays behind, and the job takes the new program's digest."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from codemode.batch import BatchError, BatchOptions, SqliteJobStore, prepare_job


def write_items(path: Path, keys: list[str], bad_line: int | None = None) -> Path:
    lines = [json.dumps({"id": key}) for key in keys]
    if bad_line is not None:
        lines[bad_line - 1] = "{not json"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def runnable(store: SqliteJobStore, job_id: str) -> list[str]:
    return [item.key for item in store.runnable(job_id, max_attempts=3, retry_unknown=False)]


def test_a_strict_refusal_past_the_first_page_leaves_a_job_that_starts_once_the_line_is_fixed(
    tmp_path: Path,
) -> None:
    keys = [f"k{i}" for i in range(700)]
    path = write_items(tmp_path / "in.jsonl", keys, bad_line=600)
    store = SqliteJobStore(tmp_path / "jobs.db")
    options = BatchOptions(job_id="j", key="id", strict=True)
    with pytest.raises(BatchError, match="input line 600"):
        prepare_job(store, "INPUT", path, options)
    write_items(path, keys)
    for again in (options, BatchOptions(job_id="j", key="id", strict=True, resume=True)):
        job = prepare_job(store, "INPUT", path, again)
        assert job.job_id == "j"
    assert store.counts("j") == {"pending": 700}
    assert runnable(store, "j") == keys


def test_a_job_started_again_after_a_cut_short_registration_runs_only_its_new_items(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    wrong = write_items(tmp_path / "wrong.jsonl", [f"wrong-{i}" for i in range(600)] + ["x"], bad_line=601)
    with pytest.raises(BatchError, match="input line 601"):
        prepare_job(store, "'first program'", wrong, BatchOptions(job_id="j", key="id", strict=True))
    right = write_items(tmp_path / "right.jsonl", ["right-0", "right-1", "right-2"])
    prepare_job(store, "'second program'", right, BatchOptions(job_id="j", key="id", strict=True))
    assert runnable(store, "j") == ["right-0", "right-1", "right-2"]
    with pytest.raises(BatchError, match="another program"):
        prepare_job(store, "'first program'", right, BatchOptions(job_id="j", key="id", resume=True))


def test_an_interrupted_registration_of_api_items_starts_over(tmp_path: Path) -> None:
    def interrupted() -> Iterator[Mapping[str, Any]]:
        for index in range(600):
            yield {"id": f"k{index}"}
        raise KeyboardInterrupt

    store = SqliteJobStore(tmp_path / "jobs.db")
    with pytest.raises(KeyboardInterrupt):
        prepare_job(store, "INPUT", interrupted(), BatchOptions(job_id="j", key="id"))
    job = store.job("j")
    assert job is not None and not job.registered
    items = [{"id": f"k{index}"} for index in range(650)]
    prepare_job(store, "INPUT", items, BatchOptions(job_id="j", key="id"))
    assert store.counts("j") == {"pending": 650}


def test_a_registered_job_is_never_registered_over(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    prepare_job(store, "INPUT", [{"id": "a"}], BatchOptions(job_id="j", key="id"))
    with pytest.raises(ValueError, match="registered already"):
        store.begin_registration("j", "another digest")
    assert runnable(store, "j") == ["a"]
