"""The skills bench task: one job solved and saved as a skill (proposed from the run, approved in
the ledger by the bench as the reviewing person), three variations solved with it, and the same
four jobs solved without it; the report compares their tokens at equal success and says the
figures are scripted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner

from codemode.bench._accounting import TiktokenTokenizer
from codemode.bench._main import run_bench
from codemode.bench._suite import SCRIPTED_SKILLS, run_suite, write_demo_config
from codemode.bench._tasks import TaskError, load_task, load_tasks
from codemode.cli._main import cli
from codemode.config import demo_servers
from codemode.ledger import open_ledger

TASK = "skill_reuse"
SKILL = "tickets_by_risk"


@pytest.mark.integration
def test_the_skill_saves_tokens_at_equal_success_and_says_scripted(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["bench", "tokens", "--task", TASK, "--out", str(out), "--backend", "process", "--sizes", ""]
    shown = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    printed = " ".join(shown.output.split())  # as the terminal wrapped it
    assert "skills: code mode without and with a saved skill (scripted figures)" in printed
    results: dict[str, Any] = json.loads((out / "results.json").read_text(encoding="utf-8"))
    [entry] = results["skills"]
    assert (entry["task"], entry["skill"], entry["agents"]) == (TASK, SKILL, "scripted")
    without, with_skill = entry["without"], entry["with"]
    assert (without["passed"], without["runs"]) == (with_skill["passed"], with_skill["runs"]) == (4, 4)
    assert with_skill["total_tokens"] < without["total_tokens"]
    assert entry["saving"].endswith("% less")
    jobs = entry["jobs"]
    assert [j["job"] for j in jobs] == [0, 1, 2, 3] and jobs[0]["saves_skill"]
    # Saving the skill costs its source once; every variation then costs less than from scratch.
    assert jobs[0]["with"]["total_tokens"] > jobs[0]["without"]["total_tokens"]
    for job in jobs[1:]:
        assert job["with"]["total_tokens"] < job["without"]["total_tokens"], job
    modes = {(r["mode"], r["job"]) for r in results["runs"]}
    assert modes == {(m, j) for m in ("direct", "codemode", "skills") for j in range(4)}
    assert results["summary"]["skills"]["passed"] == 4
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"### {TASK}: skill `{SKILL}` (scripted figures)" in report
    assert "| | direct | code mode | code mode + skills |" in report


@pytest.mark.integration
def test_the_skill_goes_through_the_ledger(tmp_path: Path) -> None:
    """The skill is proposed by the run, approved by another principal (the bench), used by the
    variations (their calls name it) and withdrawn at the end, so a second trial proposes it
    afresh; and a tenant that has a skill of that name already is refused, not touched."""
    config = write_demo_config(tmp_path, dict(demo_servers()))
    tasks = load_tasks(only=[TASK])
    suite = anyio.run(
        lambda: run_suite(config, tasks, tokenizer=TiktokenTokenizer(), backend="process", trials=2)
    )
    assert all(r.passed for r in suite.runs), [r.error for r in suite.runs if not r.passed]
    ledger = open_ledger(tmp_path / "codemode.db")
    try:
        versions = ledger.skills.versions("default", SKILL)
        assert [(v.version, v.status, v.approved_by) for v in versions] == [
            (1, "revoked", "bench"),
            (2, "revoked", "bench"),
        ]
        assert all(v.proposed_in_run is not None and v.proposed_by == "local" for v in versions)
        by_skill = [c for c in ledger.list_calls(limit=10_000) if c.skill is not None]
        # Each variation's program called the skill, whose calls are labelled with its version.
        assert {c.skill for c in by_skill} == {f"{SKILL}@1", f"{SKILL}@2"}
        assert {c.tool for c in by_skill} == {"query_sheet", "list_tickets"}
        ledger.skills.propose(
            "default", SKILL, description="", source="", digest="", pin="", deps={}, proposed_by="alice"
        )
    finally:
        ledger.close()
    with pytest.raises(TaskError, match=f"saves skill '{SKILL}', and tenant 'default' has one"):
        anyio.run(lambda: run_suite(config, tasks, tokenizer=TiktokenTokenizer(), backend="process"))


def test_a_skills_task_must_say_its_variations(tmp_path: Path) -> None:
    source = load_tasks(only=[TASK])[0].path.read_text(encoding="utf-8")
    path = tmp_path / "broken.py"
    path.write_text(source + "\ndel VARIATIONS\n", encoding="utf-8")
    with pytest.raises(TaskError, match="a skills task \\(one with SKILL\\) must define VARIATIONS"):
        load_task(path)
    path.write_text(
        source.replace('SKILL = "tickets_by_risk"', 'SKILL = "tickets by risk"'), encoding="utf-8"
    )
    with pytest.raises(TaskError, match="SKILL must name the skill as a Python identifier"):
        load_task(path)
    task = load_tasks(only=[TASK])[0]
    assert task.modes == ("direct", "codemode", "skills")
    # Each job is checked against its own prompt's answer.
    assert [job.check({"customers": 4, "tickets": 5}) for job in task.jobs] == [True, False, False, False]
    assert load_tasks(only=["small_lookup"])[0].modes == ("direct", "codemode")


@pytest.mark.integration
def test_a_real_model_run_leaves_the_skills_task_out_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model is recorded one conversation per task, mode and trial: a skills task's several
    conversations would not replay, so it is reported as not run, never as solved or failed."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")

    def no_request(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"the skills task sent a model request: {request.content[:200]!r}")

    out = tmp_path / "out"
    results = run_bench(
        out=out,
        tasks_dir=None,
        only=[TASK],
        config_path=None,
        workspace=tmp_path,
        backend="process",
        sizes=[],
        corpus=None,
        model="openai:test-model",
        trials=1,
        prices=(3.0, 15.0),
        command="test",
        show_progress=False,
        model_transport=httpx.MockTransport(no_request),
    )
    assert results["runs"] == [] and results["skills"] == []
    assert results["skipped"] == {TASK: SCRIPTED_SKILLS}
    assert f"- {TASK}: not run: a skills task runs with its scripted agents only" in (
        out / "report.md"
    ).read_text(encoding="utf-8")
