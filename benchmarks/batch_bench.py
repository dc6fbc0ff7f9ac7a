"""Batch throughput and memory: items per second by concurrency and backend, and peak memory by size.

    .venv/bin/python benchmarks/batch_bench.py                     # 500 items, concurrency 1 2 4 8
    .venv/bin/python benchmarks/batch_bench.py --items 2000 --backends process
    .venv/bin/python benchmarks/batch_bench.py --memory 500,5000,50000 --backends process
    .venv/bin/python benchmarks/batch_bench.py --json
    .venv/bin/python benchmarks/batch_bench.py --backends docker --image codemode-sandbox:dev
    .venv/bin/python benchmarks/batch_bench.py --engine ray --items 300 --concurrency 4

``--engine ray`` compares, in one run, the local engine with the Ray engine on a cluster of 1
and of 2 local nodes. Every row then shares one crm server over Streamable HTTP and writes to
a PostgreSQL ledger (a fresh database per row), so that only the engine differs. It runs in a
network namespace of its own where only ``lo`` is up (it re-executes itself under ``unshare``;
root needed), so Ray stays on 127.0.0.1; PostgreSQL comes from the Debian package, as in the
tests.

Each item makes one tool call (``crm/add_note``, a write: a derived idempotency key, a ledger
record before sending, one crm write) through the full path: sandbox → broker → ledger → MCP.
The job runs in this process through ``CodeMode.batch``; every run uses a fresh workspace so
ledgers and crm state do not grow across measurements. Peak memory is the batch process's own
resident set (sampled every 50 ms; sandboxes and servers are separate processes). Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from codemode import CodeMode, config_from_mapping  # noqa: E402
from codemode.batch import BatchOptions  # noqa: E402
from codemode.catalog import save_lock  # noqa: E402
from codemode.host import McpHost  # noqa: E402
from codemode.testing import approved_pins  # noqa: E402

CRM = ROOT / "examples" / "servers" / "crm_server.py"
IMAGE = "codemode-sandbox:latest"
PROGRAM = (
    'from servers.crm import add_note\nadd_note(customer_id=INPUT["c"], text=INPUT["t"])["receipt_id"]\n'
)


class PeakRss:
    """The highest resident set size of this process while the block runs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self.peak = max(self.peak, me.memory_info().rss)
            self._stop.wait(0.05)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def one_job(backend: str, items: int, concurrency: int, image: str = IMAGE) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="codemode-batch-bench-") as tmp:
        root = Path(tmp)
        config = config_from_mapping(
            {
                "servers": {
                    "crm": {
                        "command": sys.executable,
                        "args": [str(CRM)],
                        "trusted": True,
                        "env": {"CRM_STATE_DIR": str(root / "crm")},
                    }
                },
                "sandbox": {"backend": backend, "pool_size": concurrency, "image": image},
                "policy": {"consent": {"never": ["crm/add_note"]}},
            },
            base_dir=root,
        )
        async with McpHost(config) as host:
            save_lock(config.lock_path, approved_pins(host.catalogs()).lock)
        source = root / "items.jsonl"
        with source.open("w", encoding="utf-8") as handle:
            for index in range(items):
                handle.write(
                    json.dumps({"id": index, "c": f"CUST-000{1 + index % 5}", "t": f"n{index}"}) + "\n"
                )
        options = BatchOptions(job_id="bench", key="id", concurrency=concurrency)
        statuses: dict[str, int] = {}
        async with CodeMode(config) as engine:
            with PeakRss() as rss:
                started = time.perf_counter()
                async for result in engine.batch(PROGRAM, source, options):
                    statuses[result.status] = statuses.get(result.status, 0) + 1
                elapsed = time.perf_counter() - started
    return {
        "backend": backend,
        "items": items,
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "items_per_s": round(items / elapsed, 1),
        "peak_rss_mb": round(rss.peak / 2**20, 1),
        "statuses": statuses,
    }


def in_own_network_namespace(argv: list[str]) -> int:
    """Run this script again inside a new network namespace with only ``lo`` up."""
    import os
    import subprocess

    script = 'ip link set lo up && exec "$@"'
    env = {**os.environ, "CODEMODE_IN_NETNS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    command = ["unshare", "--net", "--", "sh", "-c", script, "sh", sys.executable, *argv]
    return subprocess.run(command, env=env, check=False).returncode


def ray_rows(items: int, concurrency: int) -> list[dict[str, Any]]:
    """Local engine, then Ray on 1 node and on 2 nodes: same crm server, PostgreSQL ledgers."""
    from ray_bench import RayBench

    with RayBench() as bench:
        rows = [anyio.run(bench.local_job, items, concurrency)]
        print(json.dumps(rows[-1]), flush=True)
        for nodes in (1, 2):
            rows.append(bench.ray_job(items, concurrency, nodes))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--backends", default="process,docker")
    parser.add_argument("--memory", default="", help="item counts for the memory series, e.g. 500,5000,50000")
    parser.add_argument("--engine", choices=["local", "ray"], default="local")
    parser.add_argument("--image", default=IMAGE, help="the Docker backend's sandbox image")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.engine == "ray":
        import os

        if os.environ.get("CODEMODE_IN_NETNS") != "1":
            sys.exit(in_own_network_namespace(sys.argv))
        concurrency = int(args.concurrency.split(",")[0])
        found = ray_rows(args.items, concurrency)
        print(f"\n{'engine':<16} {'conc':>4} {'items':>6} {'items/s':>8}")
        for row in found:
            print(f"{row['engine']:<16} {row['concurrency']:>4} {row['items']:>6} {row['items_per_s']:>8}")
        return
    rows: list[dict[str, Any]] = []
    for backend in args.backends.split(","):
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            rows.append(anyio.run(one_job, backend, args.items, concurrency, args.image))
            if not args.json:
                print(json.dumps(rows[-1]), flush=True)
    memory: list[dict[str, Any]] = []
    for count in (int(c) for c in args.memory.split(",") if c):
        memory.append(anyio.run(one_job, args.backends.split(",")[0], count, 8, args.image))
        if not args.json:
            print(json.dumps(memory[-1]), flush=True)
    if args.json:
        print(json.dumps({"throughput": rows, "memory": memory}, indent=2))
        return
    print(f"\n{'backend':<8} {'conc':>4} {'items':>6} {'items/s':>8} {'peak MB':>8}")
    for row in rows + memory:
        print(
            f"{row['backend']:<8} {row['concurrency']:>4} {row['items']:>6} "
            f"{row['items_per_s']:>8} {row['peak_rss_mb']:>8}"
        )


if __name__ == "__main__":
    main()
