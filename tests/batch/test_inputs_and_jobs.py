"""Batch inputs are streamed and checked; the job store refuses duplicates and pages its items."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.batch import BadLine, BatchError, BatchOptions, Item, SqliteJobStore, prepare_job, read_items


def test_jsonl_items_are_keyed_and_bad_lines_are_reported_with_their_number(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a"}\n\nnot json\n[1]\n{"id": true}\n{"other": 1}\n{"id": 7}\n', encoding="utf-8")
    found = list(read_items(path, "id"))
    assert [e for e in found if isinstance(e, Item)] == [Item("a", 1, {"id": "a"}), Item("7", 7, {"id": 7})]
    assert [(e.line, e.reason.split(" ")[0]) for e in found if isinstance(e, BadLine)] == [
        (3, "not"),
        (4, "an"),
        (5, "the"),
        (6, "no"),
    ]


def test_csv_rows_become_items_and_ragged_rows_are_bad(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,name\n1,Ana\n2\n3,Bo\n", encoding="utf-8")
    found = list(read_items(path, "id"))
    assert [e.key for e in found if isinstance(e, Item)] == ["1", "3"]
    assert [e.line for e in found if isinstance(e, BadLine)] == [3]


def test_an_unknown_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.jsonl or \.csv"):
        list(read_items(tmp_path / "x.txt", None))


def store(tmp_path: Path) -> SqliteJobStore:
    return SqliteJobStore(tmp_path / "jobs.db")


def test_a_duplicate_key_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f'{{"id": "k{i % 700}"}}\n' for i in range(800)), encoding="utf-8")
    jobs = store(tmp_path)
    with pytest.raises(BatchError, match=r"duplicate key 'k0' at line 701 \(first at line 1\)"):
        prepare_job(jobs, "1", path, BatchOptions(job_id="j", key="id"))


def test_a_program_that_does_not_compile_fails_before_any_item(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n', encoding="utf-8")
    with pytest.raises(BatchError, match="does not compile"):
        prepare_job(store(tmp_path), "def (:\n", path, BatchOptions(job_id="j"))
    assert store(tmp_path).job("j") is None, "nothing was registered"


def test_resume_needs_a_known_job_and_the_same_program_and_inputs(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\n{"id": 2}\n', encoding="utf-8")
    jobs = store(tmp_path)
    with pytest.raises(BatchError, match="no job 'nope' to resume"):
        prepare_job(jobs, "1", path, BatchOptions(job_id="nope", resume=True))
    first = prepare_job(jobs, "1", path, BatchOptions(job_id="j", key="id"))
    assert not first.resumed
    assert prepare_job(jobs, "1", path, BatchOptions(job_id="j", key="id", resume=True)).resumed
    with pytest.raises(BatchError, match="another program"):
        prepare_job(jobs, "2", path, BatchOptions(job_id="j", key="id"))
    path.write_text('{"id": 1}\n{"id": 3}\n', encoding="utf-8")
    with pytest.raises(BatchError, match="inputs of job 'j' changed"):
        prepare_job(jobs, "1", path, BatchOptions(job_id="j", key="id"))


def test_strict_fails_on_a_bad_line_and_the_default_skips_it(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1}\nbroken\n', encoding="utf-8")
    with pytest.raises(BatchError, match="input line 2"):
        prepare_job(store(tmp_path), "1", path, BatchOptions(job_id="s", key="id", strict=True))
    job = prepare_job(store(tmp_path), "1", path, BatchOptions(job_id="t", key="id"))
    assert [b["line"] for b in job.bad_lines] == [2]


def test_runnable_items_are_paged_in_input_order_and_skip_finished_ones(tmp_path: Path) -> None:
    jobs = store(tmp_path)
    jobs.begin_registration("j", "d")
    jobs.register("j", ((f"k{i}", i, {"i": i}) for i in range(1, 1201)))
    first = next(jobs.runnable("j", max_attempts=3, retry_unknown=False))
    assert jobs.start("j", first.key) == 1
    keys = [item.key for item in jobs.runnable("j", max_attempts=3, retry_unknown=False)]
    assert len(keys) == 1200 and keys[:2] == ["k1", "k2"], "a running item (cut off by a crash) runs again"
