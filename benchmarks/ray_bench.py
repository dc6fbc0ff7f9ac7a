"""The ``--engine ray`` part of ``batch_bench.py``: a PostgreSQL server, one crm server over
Streamable HTTP, and Ray clusters of 1 and 2 local nodes, all on 127.0.0.1 inside the network
namespace that ``batch_bench.py`` runs in. Not a script of its own."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import anyio

from codemode import CodeMode, config_from_mapping
from codemode.batch import BatchOptions, SqliteJobStore, prepare_job, run_job, run_on_workers
from codemode.batch._ray import ray_workers
from codemode.catalog import save_lock
from codemode.config import Config
from codemode.host import McpHost
from codemode.testing import approved_pins

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.conftest import HttpServers  # noqa: E402  # the tests' server launcher
from tests.ledger._pg import PostgresServer  # noqa: E402  # the tests' throwaway server

PROGRAM = (
    'from servers.crm import add_note\nadd_note(customer_id=INPUT["c"], text=INPUT["t"])["receipt_id"]\n'
)
PASSWORD_ENV = "CODEMODE_BENCH_PG_PASSWORD"


class RayBench:
    def __enter__(self) -> RayBench:
        self.tmp = Path(tempfile.mkdtemp(prefix="codemode-ray-bench-"))
        self.pg = PostgresServer.start()
        os.environ[PASSWORD_ENV] = self.pg.password_in_url  # Ray nodes inherit it
        self.servers = HttpServers()
        self.crm_url = self.servers.start("crm", "--state-dir", str(self.tmp / "crm"))
        self.rows = 0
        return self

    def __exit__(
        self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
    ) -> None:
        self.servers.stop_all()
        self.pg.stop()

    async def _config(self) -> Config:
        """A fresh workspace and ledger database for one row, with crm synced and approved."""
        self.rows += 1
        root = self.tmp / f"row{self.rows}"
        root.mkdir()
        ledger = self.pg.url_with_reference(self.pg.new_database(), PASSWORD_ENV)
        config = config_from_mapping(
            {
                "servers": {"crm": {"url": self.crm_url, "trusted": True}},
                "sandbox": {"backend": "process", "pool_size": 1},
                "ledger": {"url": ledger},
                "policy": {"consent": {"never": ["crm/add_note"]}},
            },
            base_dir=root,
        )

        async with McpHost(config) as host:
            save_lock(config.lock_path, approved_pins(host.catalogs()).lock)
        return config

    def _items(self, config: Config, count: int) -> Path:
        source = config.base_dir / "items.jsonl"
        with source.open("w", encoding="utf-8") as handle:
            for index in range(count):
                item = {"id": index, "c": f"CUST-000{1 + index % 5}", "t": f"row{self.rows}-{index}"}
                handle.write(json.dumps(item) + "\n")
        return source

    async def local_job(self, items: int, concurrency: int) -> dict[str, Any]:
        config = await self._config()
        config = config.model_copy(
            update={"sandbox": config.sandbox.model_copy(update={"pool_size": concurrency})}
        ).with_origin(config.source, config.base_dir)
        options = BatchOptions(job_id="bench", key="id", concurrency=concurrency)
        store = SqliteJobStore(config.base_dir / "jobs.db")
        job = prepare_job(store, PROGRAM, self._items(config, items), options, config.policy)
        statuses: dict[str, int] = {}
        async with CodeMode(config) as engine:
            started = time.perf_counter()
            async for result in run_job(engine, PROGRAM, job, options):
                statuses[result.status] = statuses.get(result.status, 0) + 1
            elapsed = time.perf_counter() - started
        return _row("local", items, concurrency, elapsed, statuses)

    def ray_job(self, items: int, concurrency: int, nodes: int) -> dict[str, Any]:
        from ray.cluster_utils import Cluster

        cpus = max(1, -(-concurrency // nodes))  # enough CPUs for one actor per worker slot
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": cpus, "node_ip_address": "127.0.0.1", "include_dashboard": False},
        )
        try:
            for _ in range(nodes - 1):
                cluster.add_node(num_cpus=cpus, node_ip_address="127.0.0.1")
            address = str(cast(object, cluster.address))
            return anyio.run(self._ray_job, items, concurrency, nodes, address)
        finally:
            cluster.shutdown()

    async def _ray_job(self, items: int, concurrency: int, nodes: int, address: str) -> dict[str, Any]:
        config = await self._config()
        options = BatchOptions(job_id="bench", key="id", concurrency=concurrency)
        store = SqliteJobStore(config.base_dir / "jobs.db")
        job = prepare_job(store, PROGRAM, self._items(config, items), options, config.policy)
        statuses: dict[str, int] = {}
        async with ray_workers(config, PROGRAM, job.job_id, options, address=address) as workers:
            started = time.perf_counter()  # workers are up and warm: time the items only
            async for result in run_on_workers(workers, job, options):
                statuses[result.status] = statuses.get(result.status, 0) + 1
            elapsed = time.perf_counter() - started
        return _row(f"ray, {nodes} node{'s' if nodes > 1 else ''}", items, concurrency, elapsed, statuses)


def _row(
    engine: str, items: int, concurrency: int, elapsed: float, statuses: dict[str, int]
) -> dict[str, Any]:
    return {
        "engine": engine,
        "items": items,
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "items_per_s": round(items / elapsed, 1),
        "statuses": statuses,
    }
