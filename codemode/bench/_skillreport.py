"""The skills comparison of a benchmark run: for each skills task, its jobs solved in code mode
without skills against code mode with the skill its first job saved (tokens and success, job by
job and in all), labelled with who the agents were: a scripted agent's figure shows what the
mechanism saves when the agent uses it as written, not what a model would do."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from codemode.bench._taskrun import TaskRun

ARMS = (("without", "codemode"), ("with", "skills"))
"""Each side of the comparison and the mode its runs ran in."""


def _arm(runs: list[TaskRun]) -> dict[str, Any]:
    passed = sum(r.passed for r in runs)
    return {
        "runs": len(runs),
        "passed": passed,
        "success_rate": round(passed / len(runs), 3) if runs else None,
        "total_tokens": sum(r.input_tokens + r.output_tokens for r in runs),
    }


def _saving(without: dict[str, Any], with_skill: dict[str, Any]) -> str:
    """With skills against without: only at equal, full success (a failed job's tokens say
    nothing about what solving it costs)."""
    if not without["runs"] or not with_skill["runs"]:
        return "n/a (not run)"
    if without["passed"] < without["runs"] or with_skill["passed"] < with_skill["runs"]:
        return (
            f"n/a (solved {without['passed']}/{without['runs']} without skills, "
            f"{with_skill['passed']}/{with_skill['runs']} with)"
        )
    if not without["total_tokens"]:
        return "n/a"
    change = 1 - with_skill["total_tokens"] / without["total_tokens"]
    return f"{change:.1%} less" if change >= 0 else f"{-change:.1%} MORE"


def figure_label(agents: str, replayed: bool) -> str:
    """Who made the figures: ``scripted`` agents, or a model (live, or a replayed recording)."""
    if agents == "scripted":
        return "scripted"
    return f"{agents}, replayed" if replayed else agents


def skill_comparisons(runs: list[TaskRun], skills: dict[str, str], label: str) -> list[dict[str, Any]]:
    """One entry per skills task (``skills``: task -> its skill) that ran in both arms."""
    out: list[dict[str, Any]] = []
    for task, skill in skills.items():
        mine = [r for r in runs if r.task == task]
        if not any(r.mode == "skills" for r in mine):
            continue
        jobs: list[dict[str, Any]] = []
        for job in sorted({r.job for r in mine}):
            row: dict[str, Any] = {"job": job, "saves_skill": job == 0}
            for arm, mode in ARMS:
                row[arm] = _arm([r for r in mine if r.mode == mode and r.job == job])
            jobs.append(row)
        entry: dict[str, Any] = {"task": task, "skill": skill, "agents": label, "jobs": jobs}
        for arm, mode in ARMS:
            entry[arm] = _arm([r for r in mine if r.mode == mode])
        entry["saving"] = _saving(entry["without"], entry["with"])
        out.append(entry)
    return out


def _job_name(row: dict[str, Any]) -> str:
    return "job 1 (saves the skill)" if row["saves_skill"] else f"variation {row['job']}"


def _cell(arm: dict[str, Any]) -> str:
    return f"{arm['total_tokens']:,} ({arm['passed']}/{arm['runs']} ok)" if arm["runs"] else "n/a"


def skill_lines(results: dict[str, Any]) -> list[str]:
    """The report's skills section (nothing when no skills task ran)."""
    entries: list[dict[str, Any]] = results.get("skills") or []
    if not entries:
        return []
    lines = [
        "",
        "## Skills: tokens with and without a saved skill",
        "",
        "Each job solved in code mode from scratch (search the tools, write the whole program), "
        "against code mode with a skill: the first job's program is also proposed as a skill "
        "(`codemode.propose_skill`), approved in the ledger by the bench as the reviewing person, "
        "and each variation reads the skill and imports it. Every call went through the broker.",
    ]
    for entry in entries:
        lines += [
            "",
            f"### {entry['task']}: skill `{entry['skill']}` ({entry['agents']} figures)",
            "",
            "| job | without skills | with skills |",
            "| --- | ---: | ---: |",
        ]
        lines += [f"| {_job_name(r)} | {_cell(r['without'])} | {_cell(r['with'])} |" for r in entry["jobs"]]
        lines.append(f"| all jobs | {_cell(entry['without'])} | {_cell(entry['with'])} |")
        lines += [
            "",
            f"Tokens with the skill against without: {entry['saving']} ({entry['agents']}); success "
            f"{_rate(entry['without'])} without skills, {_rate(entry['with'])} with.",
        ]
        if entry["agents"] == "scripted":
            lines.append(
                "Scripted agents use the skill exactly as written: the figure shows what reuse saves, "
                "not how often a model would reuse it; a recorded real-model run, replayed, says that."
            )
    return lines


def _rate(arm: dict[str, Any]) -> str:
    return "n/a" if arm["success_rate"] is None else f"{arm['success_rate']:.0%}"


def skills_table(results: dict[str, Any]) -> Table | None:
    """The terminal's skills table (None when no skills task ran)."""
    entries: list[dict[str, Any]] = results.get("skills") or []
    if not entries:
        return None
    agents = entries[0]["agents"]  # one run's agents made every entry
    table = Table(title=f"skills: code mode without and with a saved skill ({agents} figures)")
    for column in ("task / job", "without skills", "with skills", "with vs without"):
        table.add_column(column, justify="left" if column == "task / job" else "right")
    for entry in entries:
        for row in entry["jobs"]:
            table.add_row(f"{entry['task']}: {_job_name(row)}", _cell(row["without"]), _cell(row["with"]), "")
        table.add_row(
            f"{entry['task']}: all jobs",
            _cell(entry["without"]),
            _cell(entry["with"]),
            entry["saving"],
        )
    return table
