"""``codemode bench tokens``: token-cost experiments, direct tool calling against code mode."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from codemode.cli._common import BACKEND_CHOICE, handle_errors, json_option, print_json, stderr, stdout
from codemode.config import BackendChoice

DEFAULT_SIZES = "100,300,1000,3000"


@click.group()
def bench() -> None:
    """Benchmarks you can reproduce on your own machine."""


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"a comma-separated list of tool counts, not {text!r}") from exc
    if any(s < 1 for s in sizes):
        raise click.BadParameter("tool counts must be positive")
    return sizes


@bench.command()
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-tokens"),
    show_default=True,
    help="Directory for results.json, report.md and the PNG charts.",
)
@click.option(
    "--tasks",
    "tasks_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A directory of task files (*.py) [default: the bundled suite].",
)
@click.option(
    "--task", "only", multiple=True, help="Run only this task (by file name without .py); repeatable."
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Your codemode.toml, for your own servers, with --tasks written for them (the bundled "
    "suite needs its own example servers). Its approved pins are used as they are. "
    "[default: the bundled docs, crm and tickets example servers, in a temporary workspace]",
)
@click.option(
    "--backend",
    type=BACKEND_CHOICE,
    default=None,
    help="Sandbox backend for code mode [default: the config's, else auto].",
)
@click.option(
    "--sizes",
    default=DEFAULT_SIZES,
    show_default=True,
    help="Catalog sizes (tool counts) for the growth series; '' skips it.",
)
@click.option(
    "--corpus",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A tool corpus directory (tools.json + queries.jsonl) to grow the catalog with, and to "
    "measure discovery on [default: generated tools].",
)
@click.option(
    "--model",
    "model",
    default=None,
    metavar="PROVIDER:NAME",
    help="anthropic:NAME or openai:NAME: a real model replaces the scripted agents "
    "(needs ANTHROPIC_API_KEY or OPENAI_API_KEY). Every request and reply goes to "
    "replay.jsonl in --out.",
)
@click.option(
    "--replay",
    "replay",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Re-score a recorded --model run (its replay.jsonl) offline: no API key, no server, "
    "no sandbox. Tokens, answers and checks are computed again; calls, times and resource use "
    "are as recorded.",
)
@click.option(
    "--trials",
    type=click.IntRange(1, 100),
    default=None,
    help="Runs per task and mode [default: 1, with --model 3].",
)
@click.option(
    "--price-input", type=float, default=3.0, show_default=True, help="USD per million input tokens."
)
@click.option(
    "--price-output", type=float, default=15.0, show_default=True, help="USD per million output tokens."
)
@json_option
@handle_errors
def tokens(
    out: Path,
    tasks_dir: Path | None,
    only: tuple[str, ...],
    config_path: Path | None,
    backend: BackendChoice | None,
    sizes: str,
    corpus: Path | None,
    model: str | None,
    replay: Path | None,
    trials: int | None,
    price_input: float,
    price_output: float,
    as_json: bool,
) -> None:
    """Run direct tool calling and code mode for real on the same tasks and servers.

    Each task is run twice: once with every MCP tool offered to the agent directly (each call
    goes to the real server through codemode's broker), once with only run_code and the
    discovery tools (programs run in the sandbox). Every model request is counted as an API
    bills it: system text, all tool definitions and the whole conversation, re-sent each turn
    (tiktoken cl100k_base, offline). A task whose answer fails its check is reported as failed.
    Next to each mode's success rate: its compensation success rate (of the runs that failed
    after side effects, those whose effects [compensation] undid; n/a when none needed it).

    A skills task (bundled: skill_reuse) runs a job and three variations of it, and a third
    way too: code mode with a saved skill. Its first job proposes the skill, the bench approves
    it in the ledger (as the person reviewing it), the variations import it, and the report
    compares tokens and success with and without the skill (scripted agents only; a --model
    run leaves it out and says so).

    \b
    Writes to --out: results.json, report.md, tokens_per_task.png, tokens_vs_catalog.png,
    cost_vs_catalog.png (charts need the 'bench' extra: pip install 'codemode[bench]'), and
    with --model replay.jsonl.

    \b
    Examples:
      codemode bench tokens --out bench-tokens
      codemode bench tokens --tasks my_tasks/ --config codemode.toml --out results/
      codemode bench tokens --model anthropic:claude-sonnet-4-5 --trials 3 --out real/
      codemode bench tokens --replay real/replay.jsonl --out rescored/

    A task file defines PROMPT, direct_agent(history), codemode_agent(history) and
    check(answer): see the README, "Token-cost experiments".
    """
    from codemode.bench import ModelError, ReplayError, ServerStartError, TaskError, run_bench

    if replay is not None:
        _replay_alone(click.get_current_context())
    with tempfile.TemporaryDirectory(prefix="codemode-bench-") as scratch:
        try:
            results = run_bench(
                out=out,
                tasks_dir=tasks_dir,
                only=list(only),
                config_path=config_path,
                workspace=Path(scratch),
                backend=backend,
                sizes=_sizes(sizes),
                corpus=corpus,
                model=model,
                trials=trials,
                prices=(price_input, price_output),
                command=_command_line(click.get_current_context()),
                show_progress=not as_json,
                replay=replay,
            )
        except (ModelError, TaskError, ServerStartError, ReplayError) as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        print_json(results)
        return
    from codemode.bench import skills_table, terminal_table

    stdout.print(terminal_table(results))
    skills = skills_table(results)
    if skills is not None:
        stdout.print(skills)
    missing = "" if results.get("charts") else " (no charts: install the 'bench' extra for matplotlib)"
    stdout.print(f"wrote {out}/results.json, {out}/report.md{missing}", highlight=False)
    _failed_note(results)


RECORDED = ("config_path", "backend", "model", "trials")
"""What a replay takes from its recording: the options that would say otherwise are refused."""


def _replay_alone(ctx: click.Context) -> None:
    given = [
        p.opts[0]
        for p in ctx.command.params
        if p.name in RECORDED and ctx.params.get(p.name) not in (None, p.default)
    ]
    if given:
        raise click.UsageError(
            f"--replay re-scores a recorded run as it ran: leave out {', '.join(given)} (the "
            "recording says which model, servers, backend and trials it had)"
        )


def _command_line(ctx: click.Context) -> str:
    """The command as it was given (options that differ from their defaults), for the report."""
    argv = ["codemode", "bench", "tokens"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or not param.name:
            continue
        value = ctx.params.get(param.name)
        if value == param.default or value is None or value == ():
            continue
        flag = param.opts[0]
        if param.is_flag:
            if value is True:
                argv.append(flag)
            continue
        for item in value if isinstance(value, tuple) else (value,):  # pyright: ignore[reportUnknownVariableType]
            argv += [flag, str(item)]  # pyright: ignore[reportUnknownArgumentType]
    return shlex.join(argv)


def _failed_note(results: dict[str, Any]) -> None:
    failed = [r for r in results["runs"] if not r["passed"]]
    for run in failed:
        text = escape(f"{run['task']} [{run['mode']}]: {run['error']}")
        stderr.print(f"[yellow]failed:[/] {text}", highlight=False)
