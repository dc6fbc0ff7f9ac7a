"""One benchmark run from start to finish: set up the servers, run the suite (with a progress
bar), grow the catalog, and write results.json, report.md and the charts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from codemode.bench._accounting import TiktokenTokenizer, Tokenizer
from codemode.bench._catalog import catalog_series
from codemode.bench._charts import write_charts
from codemode.bench._llm import ModelAgent, ModelSpec
from codemode.bench._model import Message, Mode, Reply
from codemode.bench._report import Prices, build_results, markdown
from codemode.bench._suite import MODES, AgentFactory, SuiteResult, run_suite, write_demo_config
from codemode.bench._tasks import Task, TaskError, load_tasks
from codemode.config import BackendChoice, Config, demo_servers, load_config


def _model_agents(spec: ModelSpec, key: str) -> AgentFactory:
    def make(task: Task, mode: Mode, tools: list[dict[str, Any]]) -> Callable[[list[Message]], Reply]:
        return ModelAgent(spec, tools, key)

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
) -> dict[str, Any]:
    """Run everything and write the outputs into ``out``; returns what results.json holds."""
    tokenizer = tokenizer or TiktokenTokenizer()
    tasks = load_tasks(tasks_dir, only or None)
    if model is not None and agents is None:
        spec = ModelSpec.parse(model)
        agents = _model_agents(spec, spec.key())
    trials = trials or (3 if model else 1)
    sync = config_path is None
    if config_path is None:
        config_path = write_demo_config(workspace, dict(demo_servers()))
    elif tasks_dir is None:
        require_suite_servers(load_config(config_path))
    total = len(tasks) * len(MODES) * trials
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
        job = bar.add_task("starting the servers", total=total)

        def advance(label: str) -> None:
            bar.update(job, advance=1, description=f"done {label}")

        suite: SuiteResult = anyio.run(
            lambda: run_suite(
                config_path,
                tasks,
                tokenizer=tokenizer,
                backend=backend,
                sync=sync,
                trials=trials,
                agents=agents,
                progress=advance,
            )
        )
        bar.update(job, description="growing the catalog")
        points, source = (
            catalog_series(suite.catalog, suite.runs, sizes, tokenizer, corpus=corpus) if sizes else ([], "")
        )
    results = build_results(
        runs=suite.runs,
        kinds={t.name: t.kind for t in tasks},
        prices=Prices(*prices),
        catalog=points,
        catalog_source=source,
        meta={
            "command": command,
            "agents": model or "scripted",
            "trials": trials,
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
