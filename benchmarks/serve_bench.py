"""Serve throughput (issue 42): trivial ``run_code`` calls over HTTP, 16 in flight, against
``docker run --rm`` of the sandbox image at the same concurrency.

    .venv/bin/python benchmarks/serve_bench.py                    # 200 runs, 16 in flight, every backend
    .venv/bin/python benchmarks/serve_bench.py --backends docker,process --rounds 3
    .venv/bin/python benchmarks/serve_bench.py --runs 8 --concurrency 2 --backends process --json

Each backend gets a workspace of its own (``codemode init --demo``, then ``sync`` and ``pin
--approve``: the bundled example servers, synced and approved; ``[sandbox] backend`` set to the
row's backend, ``pool_size`` to the concurrency unless ``--pool-size`` says otherwise) and a real
``codemode serve --transport http --metrics`` subprocess on a free 127.0.0.1 port, with one bearer
token. The load client is the official MCP SDK's ``Client`` over Streamable HTTP, in this process:
``--sessions`` sessions (opened before the clock starts) share ``--concurrency`` workers, each
worker sending its next ``run_code`` as soon as its last one is answered. Every run is one read
of the demo ``crm`` server (``crm/list_writes()``, an empty list: no bundled server has a
``time/get_current_time``, and this is the smallest answer of theirs, the one
``broker_bench.py`` calls too). A run that is not ``ok`` is counted as an error.

The baseline is ``docker run --rm --network none --entrypoint true <image>`` through the docker
CLI (the image ``codemode sandbox build`` makes, ``[sandbox] image``), at the same concurrency.

The series are alternated (``--rounds``, each round a share of ``--runs`` per series), every serve
series starting once its serve's warm pool is full again (read from its ``/metrics``), so that a
slow spell of this shared machine hits every series alike. Figures per series, pooled over the
rounds: operations per second (runs, or containers, over the summed wall time of its rounds), p50
and p95 latency as the client saw it, the client's CPU per operation (this process's, for serve;
the docker CLI processes', for ``docker run``), and the serve process's own CPU per run
(``psutil``). Not counted anywhere: the Docker engine (dockerd, containerd, runc), the sandboxes
and the MCP servers that serve starts. The ratio is serve runs/s over docker-run containers/s.

Issue 42's targets (runs/s >= 50, >= 10x ``docker run``, p95 < 500 ms) are printed beside each
serve row with "met" or "not met". Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import httpx  # noqa: E402
import mcp_types  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from codemode.config import SandboxConfig  # noqa: E402
from codemode.errors import SandboxError, SandboxUnavailableError  # noqa: E402
from codemode.sandbox._bwrap import probe_bwrap  # noqa: E402
from codemode.sandbox._docker_api import docker_api  # noqa: E402

PROGRAM = 'from servers.crm import list_writes\nlist_writes()["total"]\n'
TOOL = "crm/list_writes"
TARGET_RUNS_PER_S = 50.0
TARGET_RATIO = 10.0
TARGET_P95_MS = 500.0
DOCKER_RUN = "docker run --rm"
TOKEN_ENV = "CODEMODE_BENCH_TOKEN"
SETTLE_S = 300.0
WARM_GAUGE = re.compile(r"^codemode_warm_pool_ready\s+([0-9.eE+-]+)\s*$", re.MULTILINE)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class Tally:
    """One series' measurements, summed over its rounds."""

    latencies_ms: list[float] = field(default_factory=lambda: [])
    seconds: float = 0.0
    client_cpu_s: float = 0.0
    serve_cpu_s: float | None = None
    errors: int = 0
    per_round: list[float] = field(default_factory=lambda: [])
    """Operations per second of each round."""
    protocols: set[str] = field(default_factory=lambda: set[str]())
    first_error: str | None = None
    """The MCP protocol versions the client's sessions negotiated (serve rows)."""

    def add(self, latencies: list[float], seconds: float, client_cpu: float, serve_cpu: float | None) -> None:
        self.latencies_ms += latencies
        self.seconds += seconds
        self.client_cpu_s += client_cpu
        if serve_cpu is not None:
            self.serve_cpu_s = (self.serve_cpu_s or 0.0) + serve_cpu
        self.per_round.append(round(len(latencies) / seconds, 2) if seconds > 0 else 0.0)


class Verdict(TypedDict):
    target: str
    measured: float | None
    met: bool


class Row(TypedDict):
    name: str
    backend: str | None
    n: int
    errors: int
    per_s: float
    per_round_per_s: list[float]
    p50_ms: float
    p95_ms: float
    mean_ms: float
    client_cpu_ms_per_op: float
    serve_cpu_ms_per_run: float | None
    ratio_to_docker_run: float | None
    targets: dict[str, Verdict] | None
    protocol_versions: list[str]
    first_error: str | None


def _row(name: str, backend: str | None, tally: Tally) -> Row:
    n = len(tally.latencies_ms)
    return {
        "name": name,
        "backend": backend,
        "n": n,
        "errors": tally.errors,
        "per_s": round(n / tally.seconds, 2) if tally.seconds > 0 else 0.0,
        "per_round_per_s": tally.per_round,
        "p50_ms": round(_percentile(tally.latencies_ms, 0.50), 1),
        "p95_ms": round(_percentile(tally.latencies_ms, 0.95), 1),
        "mean_ms": round(statistics.fmean(tally.latencies_ms), 1),
        "client_cpu_ms_per_op": round(tally.client_cpu_s * 1000 / n, 2),
        "serve_cpu_ms_per_run": None if tally.serve_cpu_s is None else round(tally.serve_cpu_s * 1000 / n, 2),
        "ratio_to_docker_run": None,
        "targets": None,
        "protocol_versions": sorted(tally.protocols),
        "first_error": tally.first_error,
    }


def _judge(row: Row, docker_per_s: float | None) -> None:
    """The ratio to ``docker run`` and issue 42's three targets, for a serve row."""
    ratio = None if not docker_per_s else round(row["per_s"] / docker_per_s, 2)
    row["ratio_to_docker_run"] = ratio
    row["targets"] = {
        "runs_per_s": {
            "target": f">= {TARGET_RUNS_PER_S:g} runs/s",
            "measured": row["per_s"],
            "met": row["per_s"] >= TARGET_RUNS_PER_S,
        },
        "ratio_to_docker_run": {
            "target": f">= {TARGET_RATIO:g}x docker run",
            "measured": ratio,
            "met": ratio is not None and ratio >= TARGET_RATIO,
        },
        "p95_ms": {
            "target": f"p95 < {TARGET_P95_MS:g} ms",
            "measured": row["p95_ms"],
            "met": row["p95_ms"] < TARGET_P95_MS,
        },
    }


# -- codemode serve, started the real way -----------------------------------------------------


def _cli(*args: str) -> None:
    command = [sys.executable, "-m", "codemode.cli", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=_env())
    if done.returncode != 0:
        raise RuntimeError(f"`codemode {' '.join(args)}` failed:\n{done.stdout}{done.stderr}")


def _env(**extra: str) -> dict[str, str]:
    """This checkout's codemode first on the path, in every process the bench starts."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def make_workspace(directory: Path, backend: str, pool_size: int, image: str) -> Path:
    """The demo workspace, synced and approved, on ``backend``, with the bench's bearer token."""
    config = directory / "codemode.toml"
    _cli("init", "--demo", "--config", str(config))
    sandbox = f'[sandbox]\nbackend = "{backend}"\npool_size = {pool_size}\nimage = "{image}"\n'
    tokens = f'\n[serve.tokens.bench]\ntoken = "${{{TOKEN_ENV}}}"\nprincipal = "bench"\n'
    config.write_text(config.read_text(encoding="utf-8").replace("[sandbox]\n", sandbox, 1) + tokens)
    _cli("sync", "--config", str(config))
    _cli("pin", "--approve", "--config", str(config))
    return config


class Serve:
    """A ``codemode serve --transport http --metrics`` subprocess and what the bench needs of it."""

    def __init__(self, config: Path, token: str, pool_size: int) -> None:
        self.token = token
        self.pool_size = pool_size
        command = [sys.executable, "-m", "codemode.cli", "serve", "--transport", "http", "--port", "0"]
        self.process = subprocess.Popen(
            [*command, "--metrics", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(**{TOKEN_ENV: token}),
        )
        self.ps = psutil.Process(self.process.pid)
        self._lines: list[str] = []
        self._url: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._lines.append(line)
            if line.startswith("READY ") and not self._url:
                self._url.append(line.split()[1])
                self._ready.set()
        self._ready.set()  # it ended without READY: wait() says why

    def wait(self, timeout: float = 180.0) -> str:
        if not self._ready.wait(timeout) or not self._url:
            raise RuntimeError("codemode serve did not start:\n" + "".join(self._lines[-30:]))
        return self._url[0]

    @property
    def url(self) -> str:
        return self._url[0]

    def cpu_seconds(self) -> float:
        times = self.ps.cpu_times()
        return times.user + times.system

    async def settle(self) -> None:
        """Until its warm pool is full (``codemode_warm_pool_ready`` on ``/metrics``), for at most
        ``SETTLE_S``."""
        metrics = self.url.rsplit("/", 1)[0] + "/metrics"
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(timeout=10.0) as web:
            with anyio.fail_after(SETTLE_S):
                while True:
                    answer = await web.get(metrics, headers=headers)
                    answer.raise_for_status()
                    found = WARM_GAUGE.search(answer.text)
                    if found is None:
                        raise RuntimeError("serve's /metrics has no codemode_warm_pool_ready gauge")
                    if float(found.group(1)) >= self.pool_size:
                        return
                    await anyio.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _client(serve: Serve, protocol: str) -> Client:
    headers = {"Authorization": f"Bearer {serve.token}"}
    transport = streamable_http_client(serve.url, http_client=create_mcp_http_client(headers=headers))
    return Client(transport, mode=protocol)  # type: ignore[arg-type]  # checked by argparse


def _text(result: mcp_types.CallToolResult) -> str:
    text = " ".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))
    return " ".join(text.split())[:300]  # one line in the table


def _own_cpu() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


async def serve_round(
    serve: Serve, runs: int, concurrency: int, sessions: int, protocol: str, tally: Tally
) -> None:
    """``runs`` run_code calls, ``concurrency`` in flight over ``sessions`` MCP sessions."""
    await serve.settle()
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(_client(serve, protocol)) for _ in range(sessions)]
        tally.protocols |= {client.protocol_version for client in clients}
        latencies: list[float] = []
        errors = 0
        left = runs

        async def worker(client: Client) -> None:
            nonlocal left, errors
            while left > 0:
                left -= 1
                started = time.perf_counter()
                try:
                    result = await client.call_tool("run_code", {"code": PROGRAM})
                except MCPError as exc:  # counted, like a run that failed, and the load goes on
                    tally.first_error = tally.first_error or f"run_code raised: {exc}"
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)
                if result.is_error:
                    tally.first_error = tally.first_error or f"run_code answered an error: {_text(result)}"
                    errors += 1

        client_cpu, serve_cpu = _own_cpu(), serve.cpu_seconds()
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(concurrency):
                tg.start_soon(worker, clients[index % sessions])
        seconds = time.perf_counter() - started
        tally.add(latencies, seconds, _own_cpu() - client_cpu, serve.cpu_seconds() - serve_cpu)
        tally.errors += errors


async def docker_run_round(image: str, runs: int, concurrency: int, tally: Tally) -> None:
    """``runs`` ``docker run --rm … true`` at ``concurrency`` through the docker CLI."""
    docker = shutil.which("docker")
    assert docker is not None  # checked before the rounds
    argv = [docker, "run", "--rm", "--network", "none", "--entrypoint", "true", image]
    latencies: list[float] = []
    errors = 0
    left = runs

    async def worker() -> None:
        nonlocal left, errors
        while left > 0:
            left -= 1
            started = time.perf_counter()
            done = await anyio.run_process(argv, check=False)
            latencies.append((time.perf_counter() - started) * 1000)
            if done.returncode != 0:
                text = " ".join(done.stderr.decode(errors="replace").split())[:300]
                tally.first_error = tally.first_error or f"exit {done.returncode}: {text}"
                errors += 1

    client_cpu = _children_cpu()
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    seconds = time.perf_counter() - started
    tally.add(latencies, seconds, _children_cpu() - client_cpu, None)
    tally.errors += errors


# -- which rows can run here --------------------------------------------------------------------


def docker_missing(image: str) -> str | None:
    """Why neither ``docker run`` nor the Docker backend can be measured here, or None."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    try:
        api = docker_api(10.0)
    except SandboxUnavailableError as exc:
        return str(exc)
    try:
        found = api.image(image)
    except SandboxError as exc:
        return str(exc)
    finally:
        api.close()
    if found is None:
        return f"image {image} is not there: build it with `codemode sandbox build`"
    return None


def bwrap_missing(image: str) -> str | None:
    layout, why = probe_bwrap(SandboxConfig(image=image))
    return None if layout is not None else why or "bubblewrap cannot run sandboxes here"


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if index < total % parts else 0) for index in range(parts)]


@contextlib.contextmanager
def serving(backends: list[str], pool_size: int, image: str) -> Generator[dict[str, Serve]]:
    """One workspace and one running serve per backend."""
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="codemode-serve-bench-") as tmp:
        started: dict[str, Serve] = {}
        try:
            for backend in backends:
                progress(f"preparing a demo workspace for the {backend} backend …")
                directory = Path(tmp) / backend
                directory.mkdir()
                config = make_workspace(directory, backend, pool_size, image)
                started[backend] = Serve(config, token, pool_size)
            for backend, serve in started.items():
                progress(f"waiting for codemode serve ({backend}) …")
                serve.wait()
            yield started
        finally:
            for serve in started.values():
                serve.stop()


def bench(args: argparse.Namespace) -> dict[str, Any]:
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    unknown = sorted(set(backends) - {"docker", "bwrap", "process"})
    if unknown:
        raise SystemExit(f"--backends: unknown backend(s) {', '.join(unknown)}; use docker, bwrap, process")
    pool_size = args.pool_size if args.pool_size is not None else min(args.concurrency, 64)
    notes: list[str] = []
    docker_why = docker_missing(args.image)
    if docker_why is not None:
        notes.append(f"docker run --rm and the docker backend skipped: {docker_why}")
    if "docker" in backends and docker_why is not None:
        backends.remove("docker")
    if "bwrap" in backends and (why := bwrap_missing(args.image)) is not None:
        notes.append(f"bwrap skipped: {why}")
        backends.remove("bwrap")
    shares = _split(args.runs, args.rounds)
    tallies: dict[str, Tally] = {}
    if docker_why is None:
        tallies[DOCKER_RUN] = Tally()
    tallies |= {backend: Tally() for backend in backends}
    load_before = os.getloadavg()
    with serving(backends, pool_size, args.image) as serves:

        async def rounds() -> None:
            for index, share in enumerate(shares, 1):
                if share == 0:
                    continue
                for name, tally in tallies.items():
                    what = f"{name}, {share} runs, {args.concurrency} in flight"
                    progress(f"round {index}/{len(shares)}: {what} …")
                    if name == DOCKER_RUN:
                        await docker_run_round(args.image, share, args.concurrency, tally)
                    else:
                        await serve_round(
                            serves[name], share, args.concurrency, args.sessions, args.protocol, tally
                        )

        anyio.run(rounds)
    rows: list[Row] = []
    docker_per_s: float | None = None
    if DOCKER_RUN in tallies:
        rows.append(_row(f"{DOCKER_RUN} {args.image} true", None, tallies[DOCKER_RUN]))
        docker_per_s = rows[0]["per_s"]
    for backend in backends:
        row = _row(f"codemode serve, {backend} backend", backend, tallies[backend])
        _judge(row, docker_per_s)
        rows.append(row)
    return {
        "program": PROGRAM,
        "tool": TOOL,
        "runs": args.runs,
        "concurrency": args.concurrency,
        "sessions": args.sessions,
        "rounds": args.rounds,
        "pool_size": pool_size,
        "protocol": args.protocol,
        "image": args.image,
        "cpu_count": os.cpu_count(),
        "load_average": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "rows": rows,
        "notes": notes,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{report['runs']} trivial run_code calls ({report['tool']}), {report['concurrency']} in flight over "
        f"{report['sessions']} sessions, {report['rounds']} alternated rounds, "
        f"warm pool {report['pool_size']}; "
        f"load {report['load_average']['before'][0]} -> {report['load_average']['after'][0]} "
        f"on {report['cpu_count']} CPUs\n"
    )
    print(
        f"{'series':<52}{'per s':>8}{'p50 ms':>9}{'p95 ms':>9}{'client CPU':>12}{'serve CPU':>11}{'ratio':>8}"
    )
    print(f"{'':<69}{'ms/op':>12}{'ms/run':>11}")
    for row in report["rows"]:
        ratio = row["ratio_to_docker_run"]
        print(
            f"{row['name']:<52}{row['per_s']:>8.1f}{row['p50_ms']:>9.1f}{row['p95_ms']:>9.1f}"
            f"{row['client_cpu_ms_per_op']:>12.2f}{_fmt(row['serve_cpu_ms_per_run'], '.2f'):>11}"
            f"{_fmt(ratio, '.2f') + ('x' if ratio is not None else ''):>8}"
            + (f"  ({row['errors']} errors)" if row["errors"] else "")
        )
        if row["first_error"]:
            print(f"  first error: {row['first_error']}")
    judged = [row for row in report["rows"] if row["targets"] is not None]
    if judged:
        print("\nissue 42's targets:")
        for row in judged:
            verdicts = "; ".join(
                f"{v['target']}: {_fmt(v['measured'], 'g')} {'met' if v['met'] else 'not met'}"
                for v in row["targets"].values()
            )
            print(f"  {row['backend']:<8} {verdicts}")
    print("\nratio = serve runs/s / docker-run containers/s, both measured in this run")
    versions = sorted({v for row in report["rows"] for v in row["protocol_versions"]})
    if versions:
        print(f"MCP protocol the sessions negotiated ({report['protocol']}): {', '.join(versions)}")
    for note in report["notes"]:
        print(f"note: {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="run_code calls (and containers) per series")
    parser.add_argument("--concurrency", type=int, default=16, help="calls (and containers) in flight")
    parser.add_argument("--sessions", type=int, default=4, help="MCP sessions the calls are spread over")
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds the runs are split into")
    parser.add_argument(
        "--backends", default="docker,bwrap,process", help="comma-separated: docker, bwrap, process"
    )
    parser.add_argument(
        "--pool-size", type=int, default=None, help="serve's [sandbox] pool_size [default: the concurrency]"
    )
    parser.add_argument("--protocol", choices=["auto", "legacy", "2026-07-28"], default="auto")
    parser.add_argument("--image", default=SandboxConfig().image, help="the sandbox image")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    for name in ("runs", "concurrency", "sessions", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    args.sessions = min(args.sessions, args.concurrency)
    report = bench(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


if __name__ == "__main__":
    main()
