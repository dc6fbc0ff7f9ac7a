"""One benchmark run from start to finish: set up the servers, run the suite (with a progress
bar), grow the catalog, and write results.json, report.md and the charts. With ``--model``
every request and reply also goes to ``replay.jsonl``; ``--replay FILE`` re-scores such a file
instead of running anything."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from codemode.bench._accounting import TiktokenTokenizer, Tokenizer
from codemode.bench._catalog import catalog_series
from codemode.bench._charts import write_charts
from codemode.bench._model import Message, Mode, Reply
from codemode.bench._report import Prices, build_results, markdown
from codemode.bench._suite import MODES, AgentFactory, SuiteResult, run_suite, write_demo_config
from codemode.bench._taskrun import TaskRun
from codemode.bench._tasks import Task, TaskError, load_tasks
from codemode.config import BackendChoice, Config, demo_servers, load_config

if TYPE_CHECKING:
    import httpx

    from codemode.bench._llm import ModelSpec
    from codemode.bench._recording import ReplayWriter


def _model_agents(
    spec: ModelSpec, key: str, writer: ReplayWriter, transport: httpx.BaseTransport | None
) -> AgentFactory:
    """A real model per task, mode and trial, its every request and reply written to ``writer``."""
    import httpx

    from codemode.bench._llm import TIMEOUT_S, ModelAgent
    from codemode.bench._recording import RecordingTransport

    def make(
        task: Task, mode: Mode, trial: int, tools: list[dict[str, Any]]
    ) -> Callable[[list[Message]], Reply]:
        recording = RecordingTransport(transport or httpx.HTTPTransport(), writer, (task.name, mode, trial))
        return ModelAgent(spec, tools, key, client=httpx.Client(timeout=TIMEOUT_S, transport=recording))

    return make


def require_suite_servers(config: Config) -> None:
    """The bundled tasks call the bundled example servers' tools by name: against a config
    without those servers every task would fail, each for a reason that hides this one."""
    missing = [name for name in demo_servers() if name not in config.enabled_servers()]
    if missing:
        needed = ", ".join(demo_servers())
        raise TaskError(
            f"the bundled task suite needs its own example servers ({needed}), and {config.source} "
            f"has no enabled server named {', '.join(missing)}. Leave out --config to run the suite "
            "on those servers (started for you in a temporary workspace), or add --tasks DIR with "
            "tasks written for your servers (README, 'Token-cost experiments')"
        )


def run_bench(
    *,
    out: Path,
    tasks_dir: Path | None,
    only: list[str],
    config_path: Path | None,
    workspace: Path,
    backend: BackendChoice | None,
    sizes: list[int],
    corpus: Path | None,
    model: str | None,
    trials: int | None,
    prices: tuple[float, float],
    command: str,
    show_progress: bool = True,
    tokenizer: Tokenizer | None = None,
    agents: AgentFactory | None = None,
    replay: Path | None = None,
    model_transport: httpx.BaseTransport | None = None,
    recording_note: str = "",
) -> dict[str, Any]:
    """Run everything (or re-score the recorded run ``replay``) and write the outputs into
    ``out``; returns what results.json holds. ``model_transport`` stands in for the model's HTTP
    API (then no API key is needed); ``recording_note`` says in the replay file how it was made."""
    tokenizer = tokenizer or TiktokenTokenizer()
    if replay is not None:
        suite, tasks, meta = _replayed(replay, tasks_dir, only, tokenizer)
    else:
        tasks = load_tasks(tasks_dir, only or None)
        trials = trials or (3 if model else 1)
        writer: ReplayWriter | None = None
        if model is not None and agents is None:
            from codemode.bench._llm import KEYS, ModelSpec
            from codemode.bench._recording import FILE_NAME, ReplayWriter

            spec = ModelSpec.parse(model)
            # A transport standing in for the API needs no key; one that is set is still sent.
            key = spec.key() if model_transport is None else os.environ.get(KEYS[spec.provider], "none")
            writer = ReplayWriter(
                out / FILE_NAME, model=model, command=command, trials=trials, note=recording_note
            )
            agents = _model_agents(spec, key, writer, model_transport)
        try:
            suite = _live(
                tasks,
                config_path,
                workspace,
                backend,
                trials,
                tokenizer,
                agents,
                writer,
                show_progress,
                bundled=tasks_dir is None,
            )
        finally:
            if writer is not None:
                writer.close()
        meta: dict[str, Any] = {"agents": model or "scripted", "trials": trials}
        if suite.skipped:
            meta["skipped"] = suite.skipped
        if writer is not None:
            meta["replay_file"] = writer.path.name
    points, source = (
        catalog_series(suite.catalog, suite.runs, sizes, tokenizer, corpus=corpus) if sizes else ([], "")
    )
    results = build_results(
        runs=suite.runs,
        kinds={t.name: t.kind for t in tasks},
        skills={t.name: t.skill for t in tasks if t.skill},
        prices=Prices(*prices),
        catalog=points,
        catalog_source=source,
        meta={
            "command": command,
            **meta,
            "tokenizer": tokenizer.name,
            "backend": suite.backend,
            "servers": suite.tools_by_server,
            "tools": suite.tools,
            "definition_tokens": {
                "direct": suite.direct_definition_tokens,
                "codemode": suite.codemode_definition_tokens,
            },
        },
    )
    out.mkdir(parents=True, exist_ok=True)
    results["charts"] = write_charts(results, out)
    (out / "results.json").write_text(
        json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out / "report.md").write_text(markdown(results), encoding="utf-8")
    return results


def _live(
    tasks: list[Task],
    config_path: Path | None,
    workspace: Path,
    backend: BackendChoice | None,
    trials: int,
    tokenizer: Tokenizer,
    agents: AgentFactory | None,
    writer: ReplayWriter | None,
    show_progress: bool,
    *,
    bundled: bool,
) -> SuiteResult:
    sync = config_path is None
    if config_path is None:
        config_path = write_demo_config(workspace, dict(demo_servers()))
    elif bundled:
        require_suite_servers(load_config(config_path))
    chosen = config_path
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not show_progress,
        transient=True,
    ) as bar:
        total = sum(len([m for m in t.modes if m in MODES]) for t in tasks) * trials
        job = bar.add_task("starting the servers", total=total)

        def advance(label: str) -> None:
            bar.update(job, advance=1, description=f"done {label}")

        def record(run: TaskRun) -> None:
            if writer is not None:
                writer.run((run.task, run.mode, run.trial), run.measured())

        suite: SuiteResult = anyio.run(
            lambda: run_suite(
                chosen,
                tasks,
                tokenizer=tokenizer,
                backend=backend,
                sync=sync,
                trials=trials,
                agents=agents,
                progress=advance,
                on_start=None if writer is None else writer.start,
                on_run=record,
            )
        )
        bar.update(job, description="growing the catalog")
    return suite


def _replayed(
    path: Path, tasks_dir: Path | None, only: list[str], tokenizer: Tokenizer
) -> tuple[SuiteResult, list[Task], dict[str, Any]]:
    from codemode.bench._recording import read_recording
    from codemode.bench._replay import replay_suite

    recording = read_recording(path)
    recorded = list(dict.fromkeys(task for task, _, _ in recording.exchanges))
    unknown = sorted(set(only) - set(recorded))
    if unknown:
        raise TaskError(f"{path} holds no run of {', '.join(unknown)} (it holds {', '.join(recorded)})")
    tasks = load_tasks(tasks_dir, only or recorded)
    suite = anyio.run(lambda: replay_suite(recording, tasks, tokenizer))
    header = recording.header
    meta = {
        "agents": header.model,
        "trials": header.trials,
        "replay": {
            "file": str(path),
            "recorded": header.date,
            "command": header.command,
            "codemode": header.codemode,
            "note": header.note,
        },
    }
    return suite, tasks, meta
