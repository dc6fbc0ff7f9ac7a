"""Sandbox latency benchmark: a trivial program end to end, warm pool vs cold starts, every backend.

    .venv/bin/python benchmarks/sandbox_bench.py              # readable table
    .venv/bin/python benchmarks/sandbox_bench.py --json       # machine-readable
    .venv/bin/python benchmarks/sandbox_bench.py -n 50        # more iterations
    .venv/bin/python benchmarks/sandbox_bench.py --backends bwrap,process

What is timed, per iteration, for the program ``print(sum(range(10)))``:

* ``docker warm pool``   — ``SandboxManager.run`` with a ready container in the pool: send ``run``
  over the already-authenticated channel, execute, answer, hand back the outcome. The pool is
  refilled between iterations, outside the timed region (a run never reuses a container), and
  each iteration starts once the sandbox it replaces is gone (``SandboxManager.settle``), so that
  no teardown of the bench's own competes with the run timed. The run is sent as soon as its
  sandbox is ready: a run that waits for something in the sandbox after its hello shows here.
* ``docker cold (manager)`` — the same call with ``pool_size = 0``: create + start a hardened
  container, wait for its runtime to connect, then run.
* ``docker run --rm``    — the CLI baseline: ``docker run --rm --network none <image> python3 -c …``
  (same image, entrypoint replaced by the plain interpreter).
* ``bwrap warm pool`` / ``bwrap cold`` — the same two paths on the bubblewrap backend.
* ``process warm pool`` / ``process cold`` — the same two paths on the process backend.

The warm-pool p50 of each backend is also printed side by side (measured in the same run), and
the ratio p50(docker run --rm) / p50(docker warm pool). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from codemode.calls import (  # noqa: E402
    CallDenied,
    CallOutcome,
    ModuleSource,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    ToolCallRequest,
)
from codemode.config import BackendChoice, SandboxConfig  # noqa: E402
from codemode.errors import SandboxUnavailableError  # noqa: E402
from codemode.sandbox import Program, SandboxManager  # noqa: E402
from codemode.sandbox._bwrap import probe_bwrap  # noqa: E402
from codemode.sandbox._docker_api import docker_api  # noqa: E402

PROGRAM = "print(sum(range(10)))"


class NoModules:
    def module_source(self, module: str) -> ModuleSource | None:
        return None


class NoCalls:
    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        return CallDenied(gate="bench", reason="no calls in the benchmark")

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        return CallDenied(gate="bench", reason="no calls in the benchmark")

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        return CallDenied(gate="bench", reason="no calls in the benchmark")


@dataclass(frozen=True)
class Series:
    name: str
    n: int
    p50_ms: float
    p95_ms: float
    mean_ms: float
    min_ms: float


class SharedSettings(TypedDict):
    """The `SandboxConfig` fields shared by every measured path."""

    image: str
    wall_time_s: float


class Report(TypedDict):
    program: str
    iterations: int
    series: list[dict[str, Any]]
    docker_run_rm_over_warm_pool_p50: float | None
    warm_pool_p50_ms: dict[str, float]
    notes: list[str]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _series(name: str, samples: list[float]) -> Series:
    return Series(
        name=name,
        n=len(samples),
        p50_ms=round(_percentile(samples, 0.50), 2),
        p95_ms=round(_percentile(samples, 0.95), 2),
        mean_ms=round(statistics.fmean(samples), 2),
        min_ms=round(min(samples), 2),
    )


_counter = 0


def _binding() -> RunBinding:
    global _counter
    _counter += 1
    return RunBinding(run_id=f"bench-{_counter}", principal="bench", tenant="bench", trace_id=f"t{_counter}")


async def _through_manager(config: SandboxConfig, iterations: int) -> list[float]:
    samples: list[float] = []
    async with SandboxManager(config) as manager:
        for _ in range(iterations):
            await manager.settle()  # the pool full (when warm), the sandbox used before gone
            started = time.perf_counter()
            outcome = await manager.run(
                Program(PROGRAM), binding=_binding(), modules=NoModules(), handler=NoCalls()
            )
            samples.append((time.perf_counter() - started) * 1000)
            if outcome.status != "ok" or outcome.stdout != "45\n":
                raise RuntimeError(f"unexpected outcome: {outcome}")
    return samples


def _docker_run_rm(image: str, iterations: int) -> list[float]:
    docker = shutil.which("docker")
    if docker is None:
        raise RuntimeError("the docker CLI is not installed")
    argv = [docker, "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", PROGRAM]
    samples: list[float] = []
    for _ in range(iterations):
        started = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, check=True)
        samples.append((time.perf_counter() - started) * 1000)
        if out.stdout != "45\n":
            raise RuntimeError(f"unexpected output: {out.stdout!r}")
    return samples


async def _measure(name: str, run: Callable[[], Awaitable[list[float]]], results: list[Series]) -> None:
    print(f"measuring {name} …", file=sys.stderr, flush=True)
    results.append(_series(name, await run()))


async def _manager_pair(
    backend: BackendChoice, base: SharedSettings, iterations: int, results: list[Series]
) -> None:
    warm = SandboxConfig(backend=backend, pool_size=1, **base)
    cold = SandboxConfig(backend=backend, pool_size=0, **base)
    await _measure(f"{backend} warm pool", lambda: _through_manager(warm, iterations), results)
    await _measure(f"{backend} cold", lambda: _through_manager(cold, iterations), results)


async def bench(iterations: int, image: str, *, backends: tuple[str, ...]) -> Report:
    results: list[Series] = []
    notes: list[str] = []
    base: SharedSettings = {"image": image, "wall_time_s": 30.0}
    docker_ok = "docker" in backends
    if docker_ok:
        try:
            docker_api(10.0).close()
        except SandboxUnavailableError as exc:
            notes.append(f"docker skipped: {exc}")
            docker_ok = False
    if docker_ok:
        warm = SandboxConfig(backend="docker", pool_size=1, **base)
        cold = SandboxConfig(backend="docker", pool_size=0, **base)
        await _measure("docker warm pool", lambda: _through_manager(warm, iterations), results)
        await _measure("docker cold (manager)", lambda: _through_manager(cold, iterations), results)
        await _measure(
            "docker run --rm", lambda: anyio.to_thread.run_sync(_docker_run_rm, image, iterations), results
        )
    if "bwrap" in backends:
        layout, why = await anyio.to_thread.run_sync(probe_bwrap, SandboxConfig(**base))
        if layout is None:
            notes.append(f"bwrap skipped: {why}")
        else:
            await _manager_pair("bwrap", base, iterations, results)
    if "process" in backends:
        await _manager_pair("process", base, iterations, results)
    by_name = {series.name: series for series in results}
    warm_p50 = {
        name: by_name[f"{name} warm pool"].p50_ms
        for name in ("docker", "bwrap", "process")
        if f"{name} warm pool" in by_name
    }
    ratio: float | None = None
    if "docker warm pool" in by_name and "docker run --rm" in by_name:
        ratio = round(by_name["docker run --rm"].p50_ms / by_name["docker warm pool"].p50_ms, 1)
    return {
        "program": PROGRAM,
        "iterations": iterations,
        "series": [asdict(series) for series in results],
        "docker_run_rm_over_warm_pool_p50": ratio,
        "warm_pool_p50_ms": warm_p50,
        "notes": notes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("-n", "--iterations", type=int, default=30)
    parser.add_argument("--image", default=SandboxConfig().image)
    parser.add_argument("--no-docker", action="store_true", help="leave Docker out")
    parser.add_argument(
        "--backends", default="docker,bwrap,process", help="comma-separated: docker, bwrap, process"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    backends = tuple(name.strip() for name in args.backends.split(",") if name.strip())
    if args.no_docker:
        backends = tuple(name for name in backends if name != "docker")
    report = anyio.run(lambda: bench(args.iterations, args.image, backends=backends))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"trivial program {PROGRAM!r}, {args.iterations} iterations, end to end (ms)\n")
    print(f"{'path':<24}{'p50':>10}{'p95':>10}{'mean':>10}{'min':>10}")
    for series in report["series"]:
        print(
            f"{series['name']:<24}{series['p50_ms']:>10.1f}{series['p95_ms']:>10.1f}"
            f"{series['mean_ms']:>10.1f}{series['min_ms']:>10.1f}"
        )
    if report["warm_pool_p50_ms"]:
        side_by_side = ", ".join(f"{name} {p50:.1f} ms" for name, p50 in report["warm_pool_p50_ms"].items())
        print(f"\nwarm start (warm pool p50): {side_by_side}")
    if report["docker_run_rm_over_warm_pool_p50"] is not None:
        print(f"\ndocker run --rm p50 / warm pool p50 = {report['docker_run_rm_over_warm_pool_p50']}x")
    for note in report["notes"]:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
