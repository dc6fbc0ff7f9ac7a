"""Broker overhead benchmark: one trivial tool call through sandbox + broker vs a direct client.

    .venv/bin/python benchmarks/broker_bench.py                 # readable table
    .venv/bin/python benchmarks/broker_bench.py --json          # machine-readable
    .venv/bin/python benchmarks/broker_bench.py -n 300 --backend docker
    .venv/bin/python benchmarks/broker_bench.py --backend docker,process   # both, alternated

All paths call the same tool of the same example server (``crm``, over stdio, a process of its
own for each path), in the same run, in alternating rounds so that machine noise hits them alike:

* ``direct`` — an ``mcp.Client`` in this process calls the tool and waits for the answer.
* ``read``   — a program in the sandbox calls the generated stub in a loop and times each call
  with ``time.perf_counter()`` inside the sandbox: the channel to the host, every broker gate,
  the MCP call, the result filter and the way back. The policy declares the tool read-only
  (``[policy.consent] read_only``), so its one ledger record is queued after the answer.
* ``write``  — the same, on an engine whose policy does not declare it read-only (consent is
  waived with ``never``): the write path, a record written and fsync'd before the request
  leaves and the outcome's record fsync'd after (``[ledger] durability = "full"``, the default).
* ``write_ahead`` — the write path with ``durability = "write_ahead"``: only the record before
  the request is fsync'd; the outcome's record is committed without waiting for the disk.

The headline is the ratio of each path's p50 to the direct call's (targets: 1.3x for a read,
2.0x for a write with its write-ahead record and fsync). Next to it, "round by round" is the
median of each round's own ratio (with the lowest and highest): a paired measure that a slow
spell of the machine, hitting one path's round more than another's, moves far less.
Throughput is calls per second on the read path with 1 and with 16 calls in flight (the program
fans out with ``codemode_runtime.parallel``), next to the direct client with 1 and 16 concurrent
tasks, in alternating rounds too (``--throughput-rounds``). Before every series the bench waits
until each engine's warm pool is full again and its used sandboxes are gone, so that no series
pays for the sandboxes of the one before it. The per-stage breakdown (``benchmarks/_stages.py``)
runs last, with timers wrapped on the broker, outside the ratio's rounds.

The tool is ``crm/list_writes(customer_id=…)`` for a customer without writes: a small answer,
so the numbers show the cost of the path and not of moving data. ``--tool get_customer`` times
a 4 KB record with e-mail addresses and phone numbers (PII tokenisation at work) instead.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, get_args

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import mcp  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from benchmarks._stages import STAGES, timing  # noqa: E402
from codemode.catalog import approve, load_lock, observe, save_lock  # noqa: E402
from codemode.config import BackendChoice, load_config  # noqa: E402
from codemode.engine._engine import CodeMode  # noqa: E402
from codemode.host import McpHost  # noqa: E402

CRM = ROOT / "examples" / "servers" / "crm_server.py"
PATHS = ("read", "write", "write_ahead")
TARGETS = {"read": 1.3, "write_ahead": 2.0}

TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "list_writes": ("list_writes", {"customer_id": "CUST-0002"}),
    "get_customer": ("get_customer", {"customer_id": "CUST-0001"}),
}


@dataclass(frozen=True)
class Latency:
    name: str
    n: int
    p50_ms: float
    p95_ms: float
    mean_ms: float


@dataclass(frozen=True)
class Throughput:
    """Calls per second over ``rounds`` alternating measurements of ``calls`` calls each: the
    median, and the median of each round's share of the direct client's figure (paired)."""

    name: str
    concurrency: int
    calls: int
    rounds: int
    calls_per_s: float
    low: float
    high: float
    share_of_direct: float


def throughput(
    name: str, concurrency: int, calls: int, per_s: list[float], direct: list[float]
) -> Throughput:
    share = paired_ratios(per_s, direct)["median"]
    return Throughput(
        name, concurrency, calls, len(per_s), statistics.median(per_s), min(per_s), max(per_s), share
    )


def latency(name: str, samples_s: list[float]) -> Latency:
    ordered = sorted(samples_s)
    return Latency(
        name=name,
        n=len(ordered),
        p50_ms=statistics.median(ordered) * 1000,
        p95_ms=ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] * 1000,
        mean_ms=statistics.fmean(ordered) * 1000,
    )


def write_config(directory: Path, backend: str, path: str) -> Path:
    """A workspace whose policy sends the tools down the ``read`` or the ``write`` path."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "codemode.toml"
    tools = json.dumps([f"crm/{name}" for name, _ in TOOLS.values()])
    consent = f"read_only = {tools}" if path == "read" else f"never = {tools}"
    durability = "write_ahead" if path == "write_ahead" else "full"
    config.write_text(
        f"""
[servers.crm]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(CRM))}]
env = {{ CRM_STATE_DIR = {json.dumps(str(directory / "crm"))} }}

[sandbox]
backend = "{backend}"
wall_time_s = 600

[policy.budget]
calls_per_run = 1000000
concurrent_calls = 16

[policy.consent]
{consent}

[ledger]
durability = "{durability}"
""",
        encoding="utf-8",
    )
    return config


async def pin_everything(config_path: Path) -> None:
    """What ``codemode sync`` + ``codemode pin --approve`` do, in process."""
    config = load_config(config_path)
    async with McpHost(config) as host:
        catalogs = host.catalogs()
    lock = load_lock(config.lock_path)
    for catalog in catalogs:
        lock, _ = observe(lock, catalog)
    lock, _ = approve(lock)
    save_lock(config.lock_path, lock)


def loop_program(tool: str, arguments: dict[str, Any], n: int) -> str:
    return f"""
import time
from servers.crm import {tool}
args = {arguments!r}
{tool}(**args)
samples = []
for _ in range({n}):
    start = time.perf_counter()
    {tool}(**args)
    samples.append(time.perf_counter() - start)
samples
"""


def fan_out_program(tool: str, arguments: dict[str, Any], n: int, concurrency: int) -> str:
    return f"""
import time
import codemode_runtime
from servers.crm import {tool}
args = {arguments!r}
{tool}(**args)
start = time.perf_counter()
codemode_runtime.parallel({tool}, [args] * {n}, max_workers={concurrency})
time.perf_counter() - start
"""


async def direct_loop(client: mcp.Client, tool: str, arguments: dict[str, Any], n: int) -> list[float]:
    samples: list[float] = []
    for _ in range(n):
        start = time.perf_counter()
        result = await client.call_tool(tool, arguments)
        samples.append(time.perf_counter() - start)
        if result.is_error:
            raise RuntimeError(f"direct call failed: {result.content}")
    return samples


async def direct_fan_out(
    client: mcp.Client, tool: str, arguments: dict[str, Any], n: int, concurrency: int
) -> float:
    todo = iter(range(n))

    async def worker() -> None:
        for _ in todo:
            await client.call_tool(tool, arguments)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return time.perf_counter() - start


async def settle(engines: Iterable[CodeMode]) -> None:
    """Wait until every engine's warm pool is full again and its used sandboxes are gone. A run's
    sandbox is destroyed and replaced when the run ends, and both (an interpreter; for Docker,
    runc and the engine) take the CPU from whatever runs next: without this, each series pays
    for the one before it."""
    for engine in engines:
        sandboxes = engine._sandboxes  # pyright: ignore[reportPrivateUsage]
        assert sandboxes is not None
        await sandboxes.settle()


async def broker_run(engine: CodeMode, code: str) -> Any:
    result = await engine.run(code)
    if result.status != "ok":
        raise RuntimeError(f"the benchmark program failed: {result.error}")
    return result.result


async def breakdown(engine: CodeMode, tool: str, arguments: dict[str, Any], n: int) -> dict[str, float]:
    """Median ms per call of each broker stage, with the channel and runtime as the remainder of
    what the sandbox measured (timers on; a run of its own, outside the ratio's rounds)."""
    broker = engine._broker  # pyright: ignore[reportPrivateUsage]
    assert broker is not None
    with timing(broker) as clock:
        in_sandbox = await broker_run(engine, loop_program(tool, arguments, n))
    handled = clock.samples["broker total"][1:]  # the program's first, untimed warm-up call
    medians = clock.medians_ms()
    stages = {stage: medians.get(stage, 0.0) for stage, _ in STAGES}
    stages["other broker work"] = medians["other broker work"]
    stages["channel and runtime"] = (
        statistics.median(s - h for s, h in zip(in_sandbox, handled, strict=True)) * 1000
    )
    stages["whole call (in the sandbox)"] = statistics.median(in_sandbox) * 1000
    return stages


async def fan_out_rates(
    client: mcp.Client,
    engines: list[CodeMode],
    reads: dict[str, CodeMode],
    tool: str,
    arguments: dict[str, Any],
    calls: int,
    rounds: int,
) -> dict[tuple[str, int], list[float]]:
    """Calls per second of the direct client and of each read path, with 1 and 16 calls in
    flight, in alternating rounds: (series, in flight) -> one figure per round. Every engine of
    ``engines`` is settled before each series."""
    rates: dict[tuple[str, int], list[float]] = defaultdict(list)
    for _ in range(rounds):
        for concurrency in (1, 16):
            await settle(engines)
            seconds = await direct_fan_out(client, tool, arguments, calls, concurrency)
            rates[("direct", concurrency)].append(calls / seconds)
            code = fan_out_program(tool, arguments, calls, concurrency)
            for label, engine in reads.items():
                await settle(engines)
                rates[(label, concurrency)].append(calls / float(await broker_run(engine, code)))
    return dict(sorted(rates.items(), key=lambda item: item[0][1]))


def paired_ratios(path: list[float], direct: list[float]) -> dict[str, float]:
    """Each round's figure (a p50, a rate) over the direct call's in the same round: their
    median and range.

    A shared machine's slow spells last seconds and hit whichever path runs then; a ratio taken
    within each round cancels them, where the ratio of the pooled p50s does not."""
    ratios = sorted(p / d for p, d in zip(path, direct, strict=True))
    return {"median": statistics.median(ratios), "low": ratios[0], "high": ratios[-1]}


def path_of(label: str) -> str:
    """``read`` for ``read`` or ``read@docker``: the path a series label measures."""
    return label.partition("@")[0]


async def bench(
    n: int,
    rounds: int,
    fan_out_calls: int,
    throughput_rounds: int,
    backends: list[str],
    tool_key: str,
    stages: bool,
) -> dict[str, Any]:
    """Every path on every backend, and the direct call, in the same alternating rounds. With one
    backend a series is named by its path (``read``); with several, ``read@docker``."""
    tool, arguments = TOOLS[tool_key]
    labels = {
        (f"{path}@{backend}" if len(backends) > 1 else path): (path, backend)
        for backend in backends
        for path in PATHS
    }
    directory = Path(tempfile.mkdtemp(prefix="codemode-broker-bench-"))
    try:
        configs = {
            label: write_config(directory / label.replace("@", "-"), backend, path)
            for label, (path, backend) in labels.items()
        }
        for config_path in configs.values():
            await pin_everything(config_path)
        params = StdioServerParameters(
            command=sys.executable, args=[str(CRM)], env={"CRM_STATE_DIR": str(directory / "crm-direct")}
        )
        samples: dict[str, list[float]] = {"direct": [], **{label: [] for label in labels}}
        by_round: dict[str, list[float]] = {name: [] for name in samples}  # each round's p50
        async with contextlib.AsyncExitStack() as stack:
            engines = {
                label: await stack.enter_async_context(CodeMode(load_config(c)))
                for label, c in configs.items()
            }
            used = {backend: engines[label].backend for label, (_, backend) in labels.items()}
            client = await stack.enter_async_context(mcp.Client(params))
            await direct_loop(client, tool, arguments, 20)  # warm-up
            for engine in engines.values():
                await broker_run(engine, loop_program(tool, arguments, 20))
            per_round = max(1, n // rounds)
            for _ in range(rounds):
                await settle(engines.values())
                measured = await direct_loop(client, tool, arguments, per_round)
                samples["direct"] += measured
                by_round["direct"].append(statistics.median(measured))
                for label, engine in engines.items():
                    await settle(engines.values())
                    measured = await broker_run(engine, loop_program(tool, arguments, per_round))
                    samples[label] += measured
                    by_round[label].append(statistics.median(measured))
            reads = {label: engines[label] for label, (path, _) in labels.items() if path == "read"}
            rates = await fan_out_rates(
                client, list(engines.values()), reads, tool, arguments, fan_out_calls, throughput_rounds
            )
            per_stage: dict[str, dict[str, float]] | None = None
            if stages:
                per_stage = {}
                for label, engine in engines.items():
                    await settle(engines.values())
                    per_stage[label] = await breakdown(engine, tool, arguments, n)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    series = {name: latency(name, values) for name, values in samples.items()}
    direct = series["direct"]
    return {
        "tool": f"crm/{tool}",
        "arguments": arguments,
        "backend": ", ".join(used[backend] for backend in backends),
        "paths": list(labels),
        "latency": [asdict(s) for s in series.values()],
        "p50_ratio": {label: series[label].p50_ms / direct.p50_ms for label in labels},
        "p95_ratio": {label: series[label].p95_ms / direct.p95_ms for label in labels},
        "paired_p50_ratio": {label: paired_ratios(by_round[label], by_round["direct"]) for label in labels},
        "target_p50_ratio": TARGETS,
        "throughput": [
            asdict(throughput(name, concurrency, fan_out_calls, per_s, rates[("direct", concurrency)]))
            for (name, concurrency), per_s in rates.items()
        ],
        "breakdown_ms": per_stage,
    }


def print_table(report: dict[str, Any]) -> None:
    labels: list[str] = report["paths"]
    width = max(8, *map(len, labels))
    print(f"tool {report['tool']} {report['arguments']}, sandbox backend {report['backend']}")
    print()
    print(f"{'path':<{width}} {'n':>6} {'p50 ms':>9} {'p95 ms':>9} {'mean ms':>9}")
    for s in report["latency"]:
        print(
            f"{s['name']:<{width}} {s['n']:>6} {s['p50_ms']:>9.2f} {s['p95_ms']:>9.2f} {s['mean_ms']:>9.2f}"
        )
    print()
    for label in labels:
        target = report["target_p50_ratio"].get(path_of(label))
        wanted = f"target <= {target}x" if target is not None else "no target"
        paired = report["paired_p50_ratio"][label]
        print(
            f"{label} / direct: p50 {report['p50_ratio'][label]:.2f}x ({wanted}), "
            f"p95 {report['p95_ratio'][label]:.2f}x; round by round: p50 {paired['median']:.2f}x "
            f"({paired['low']:.2f}-{paired['high']:.2f}x)"
        )
    print()
    rounds = report["throughput"][0]["rounds"]
    print(
        f"throughput: median of {rounds} alternating rounds (lowest-highest); share of direct, round by round"
    )
    print(f"{'path':<{width}} {'in flight':>9} {'calls/s':>9} {'range':>15} {'of direct':>10}")
    for t in report["throughput"]:
        spread = f"{t['low']:.0f}-{t['high']:.0f}"
        print(
            f"{t['name']:<{width}} {t['concurrency']:>9} {t['calls_per_s']:>9.1f} {spread:>15} "
            f"{t['share_of_direct']:>9.0%}"
        )
    if report["breakdown_ms"]:
        print()
        print("per-call p50 by stage, ms (timers on, runs of their own)")
        explained = dict(STAGES)
        column = max(7, *map(len, labels))
        rows = list(next(iter(report["breakdown_ms"].values())))
        print(f"  {'stage':<28} " + " ".join(f"{label:>{column}}" for label in labels))
        for stage in rows:
            values = " ".join(f"{report['breakdown_ms'][label][stage]:>{column}.3f}" for label in labels)
            print(f"  {stage:<28} {values}  {explained.get(stage, '')}")


def at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give 1 or more")
    return value


def backend_list(text: str) -> list[str]:
    """``docker,process`` -> ["docker", "process"], each a known backend, none twice."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = get_args(BackendChoice)
    unknown = [name for name in names if name not in known]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give one or more of {', '.join(known)}, comma-separated, each once"
        )
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("-n", type=at_least_one, default=400, help="latency samples per path (default 400)")
    parser.add_argument("--rounds", type=at_least_one, default=4, help="alternating rounds (default 4)")
    parser.add_argument("--calls", type=at_least_one, default=400, help="calls per throughput measurement")
    parser.add_argument(
        "--throughput-rounds", type=at_least_one, default=3, help="alternating throughput rounds (default 3)"
    )
    parser.add_argument(
        "--backend",
        type=backend_list,
        default=["auto"],
        metavar="NAME[,NAME]",
        help=f"sandbox backend(s), alternated in one run: {', '.join(get_args(BackendChoice))} "
        "(e.g. docker,process; default auto)",
    )
    parser.add_argument("--tool", choices=sorted(TOOLS), default="list_writes")
    parser.add_argument(
        "--no-breakdown",
        action="store_true",
        help="skip the per-stage breakdown (timers wrapped on the broker)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    options = parser.parse_args()
    report = anyio.run(
        bench,
        options.n,
        options.rounds,
        options.calls,
        options.throughput_rounds,
        options.backend,
        options.tool,
        not options.no_breakdown,
    )
    if options.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


if __name__ == "__main__":
    main()
