"""Broker overhead benchmark: one trivial read-only tool call through sandbox + broker vs a direct client.

    .venv/bin/python benchmarks/broker_bench.py                 # readable table
    .venv/bin/python benchmarks/broker_bench.py --json          # machine-readable
    .venv/bin/python benchmarks/broker_bench.py -n 300 --backend docker

Both paths call the same tool of the same example server (``crm``, over stdio, a process of
its own for each path), in the same run, in alternating rounds so that machine noise hits
both alike:

* ``direct``  — an ``mcp.Client`` in this process calls the tool and waits for the answer.
* ``broker``  — a program in the sandbox calls the generated stub in a loop and times each call
  with ``time.perf_counter()`` inside the sandbox: the channel to the host, every broker gate,
  the ledger record before and after the call (with its fsync), the MCP call, the result filter
  and the way back.

The headline is the ratio of the p50s (target: within 1.3x of the direct call). Throughput is
calls per second through the broker with 1 and with 16 calls in flight (the program fans out
with ``codemode_runtime.parallel``), next to the direct client with 1 and 16 concurrent tasks.

The tool is ``crm/list_writes(customer_id=…)`` for a customer without writes: a small answer,
so the numbers show the cost of the path and not of moving data. ``--tool get_customer`` times
a 4 KB record with e-mail addresses and phone numbers (PII tokenisation at work) instead.
The policy declares both tools read-only (``[policy.consent] read_only``), as an operator would
for reads: their ledger records are then written without an fsync (see ``Broker._durable``);
``--untrusted`` leaves that out, so every record is fsync'd. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
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
from codemode._engine import CodeMode  # noqa: E402
from codemode.catalog import approve, load_lock, observe, save_lock  # noqa: E402
from codemode.config import BackendChoice, load_config  # noqa: E402
from codemode.host import McpHost  # noqa: E402

CRM = ROOT / "examples" / "servers" / "crm_server.py"

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
    name: str
    concurrency: int
    calls: int
    seconds: float
    calls_per_s: float


def latency(name: str, samples_s: list[float]) -> Latency:
    ordered = sorted(samples_s)
    return Latency(
        name=name,
        n=len(ordered),
        p50_ms=statistics.median(ordered) * 1000,
        p95_ms=ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] * 1000,
        mean_ms=statistics.fmean(ordered) * 1000,
    )


def write_config(directory: Path, backend: str, read_only: bool) -> Path:
    config = directory / "codemode.toml"
    declared = [f"crm/{name}" for name, _ in TOOLS.values()] if read_only else []
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
read_only = {json.dumps(declared)}
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
    stages["other broker work"] = max(0.0, medians["broker total"] - sum(stages.values()))
    stages["channel and runtime"] = (
        statistics.median(s - h for s, h in zip(in_sandbox, handled, strict=True)) * 1000
    )
    stages["whole call (in the sandbox)"] = statistics.median(in_sandbox) * 1000
    return stages


async def bench(
    n: int, rounds: int, fan_out_calls: int, backend: str, tool_key: str, read_only: bool, stages: bool
) -> dict[str, Any]:
    tool, arguments = TOOLS[tool_key]
    directory = Path(tempfile.mkdtemp(prefix="codemode-broker-bench-"))
    try:
        config_path = write_config(directory, backend, read_only)
        await pin_everything(config_path)
        params = StdioServerParameters(
            command=sys.executable, args=[str(CRM)], env={"CRM_STATE_DIR": str(directory / "crm-direct")}
        )
        direct: list[float] = []
        brokered: list[float] = []
        async with CodeMode(load_config(config_path)) as engine, mcp.Client(params) as client:
            used_backend = engine.backend
            await direct_loop(client, tool, arguments, 20)  # warm-up
            await broker_run(engine, loop_program(tool, arguments, 20))
            per_round = max(1, n // rounds)
            for _ in range(rounds):
                direct += await direct_loop(client, tool, arguments, per_round)
                brokered += await broker_run(engine, loop_program(tool, arguments, per_round))
            throughput: list[Throughput] = []
            for concurrency in (1, 16):
                seconds = await direct_fan_out(client, tool, arguments, fan_out_calls, concurrency)
                throughput.append(
                    Throughput("direct", concurrency, fan_out_calls, seconds, fan_out_calls / seconds)
                )
                code = fan_out_program(tool, arguments, fan_out_calls, concurrency)
                seconds = float(await broker_run(engine, code))
                throughput.append(
                    Throughput("broker", concurrency, fan_out_calls, seconds, fan_out_calls / seconds)
                )
            per_stage = await breakdown(engine, tool, arguments, n) if stages else None
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    series = [latency("direct", direct), latency("broker", brokered)]
    ratio = series[1].p50_ms / series[0].p50_ms
    return {
        "tool": f"crm/{tool}",
        "arguments": arguments,
        "backend": used_backend,
        "declared_read_only": read_only,
        "latency": [asdict(s) for s in series],
        "p50_ratio": ratio,
        "p95_ratio": series[1].p95_ms / series[0].p95_ms,
        "target_p50_ratio": 1.3,
        "throughput": [asdict(t) for t in throughput],
        "breakdown_ms": per_stage,
    }


def print_table(report: dict[str, Any]) -> None:
    declared = "declared read-only" if report["declared_read_only"] else "not declared read-only"
    print(f"tool {report['tool']} {report['arguments']} ({declared}), sandbox backend {report['backend']}")
    print()
    print(f"{'path':<8} {'n':>6} {'p50 ms':>9} {'p95 ms':>9} {'mean ms':>9}")
    for s in report["latency"]:
        print(f"{s['name']:<8} {s['n']:>6} {s['p50_ms']:>9.2f} {s['p95_ms']:>9.2f} {s['mean_ms']:>9.2f}")
    print()
    print(
        f"broker / direct: p50 {report['p50_ratio']:.2f}x (target <= {report['target_p50_ratio']}x), "
        f"p95 {report['p95_ratio']:.2f}x"
    )
    print()
    print(f"{'path':<8} {'in flight':>9} {'calls':>7} {'seconds':>9} {'calls/s':>9}")
    for t in report["throughput"]:
        print(
            f"{t['name']:<8} {t['concurrency']:>9} {t['calls']:>7} {t['seconds']:>9.2f} "
            f"{t['calls_per_s']:>9.1f}"
        )
    if report["breakdown_ms"]:
        print()
        print("per-call p50 by stage (timers on, a run of its own)")
        explained = dict(STAGES)
        for stage, ms in report["breakdown_ms"].items():
            print(f"  {stage:<28} {ms:>7.3f} ms  {explained.get(stage, '')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("-n", type=int, default=400, help="latency samples per path (default 400)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    parser.add_argument("--calls", type=int, default=400, help="calls per throughput measurement")
    parser.add_argument("--backend", choices=list(get_args(BackendChoice)), default="auto")
    parser.add_argument("--tool", choices=sorted(TOOLS), default="list_writes")
    parser.add_argument(
        "--untrusted", action="store_true", help="do not declare the tool read-only in the policy"
    )
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
        options.backend,
        options.tool,
        not options.untrusted,
        not options.no_breakdown,
    )
    if options.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


if __name__ == "__main__":
    main()
