"""Batch items on a Ray cluster: one actor per worker slot, each with an engine of its own.

Each actor holds its own MCP connections, warm sandbox and broker (a
:class:`~codemode.batch._worker.RemoteWorker`), and all of them write to one shared ledger, so
the ledger's idempotency keys keep every side effect single across machines. The driver keeps
the job store, feeds items one per actor (backpressure: it never holds more than one item per
worker), and gets each result back, exactly as with the local engine.

A killed actor is restarted by Ray, possibly on another node; its item fails that attempt with
:class:`WorkerLost` and runs again, and its completed calls replay from the ledger.

Ray is an optional extra (``pip install 'codemode[ray]'``), imported only here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from types import ModuleType
from typing import Any

import anyio

from codemode.batch._jobs import StoredItem
from codemode.batch._runner import BatchError, BatchOptions, ItemResult, WorkerLost
from codemode.batch._worker import RemoteWorker, WorkerSpec, worker_name
from codemode.config import Config
from codemode.ledger import StoreError

START_TIMEOUT_S = 600.0
"""How long workers may take to start (image pulls, server installs) before the job gives up."""


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise BatchError("--engine ray needs Ray: pip install 'codemode[ray]'") from None
    return ray


class BatchActor:
    """The Ray actor: a thin shell around :class:`RemoteWorker` (one item at a time)."""

    def __init__(self, spec: WorkerSpec) -> None:
        import ray

        node = ray.get_runtime_context().get_node_id()[:12]
        self._worker = RemoteWorker(spec, where=f"{worker_name()}, ray node {node}")

    async def start(self) -> str:
        return await self._worker.start()

    async def run(self, item: StoredItem, attempt: int) -> ItemResult:
        return await self._worker.run(item, attempt)

    async def close(self) -> None:
        await self._worker.close()


class RayWorker:
    """The driver's side of one actor (an :class:`~codemode.batch._runner.ItemWorker`)."""

    def __init__(self, handle: Any, ray: ModuleType) -> None:
        self._handle = handle
        self._ray = ray

    async def start(self) -> str:
        return str(await self._call(self._handle.start.remote()))

    async def run(self, item: StoredItem, attempt: int) -> ItemResult:
        result: ItemResult = await self._call(self._handle.run.remote(item, attempt))
        return result

    async def _call(self, ref: Any) -> Any:
        errors = self._ray.exceptions
        try:
            return await ref
        except (errors.RayActorError, errors.ActorUnavailableError) as exc:
            raise WorkerLost(f"its worker was lost mid-item ({type(exc).__name__})") from None
        except errors.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, BatchError | StoreError):  # a refusal; the ledger out of reach
                raise cause from None
            raise


@contextlib.asynccontextmanager
async def ray_workers(
    config: Config, program: str, job_id: str, options: BatchOptions, *, address: str | None
) -> AsyncGenerator[list[RayWorker]]:
    """``options.concurrency`` started actors on the cluster at ``address`` (``auto``: the one
    this machine belongs to); each has checked its pins before this yields."""
    if config.ledger.url is None:
        raise BatchError(
            "--engine ray needs a ledger that every node reaches: set [ledger] url = "
            '"postgresql://…" (a SQLite ledger is a file on one machine)'
        )
    ray = import_ray()
    spec = WorkerSpec.build(config, program, job_id, options)
    connected_here = not ray.is_initialized()
    if connected_here:
        try:
            ray.init(address=address or "auto", logging_level=logging.ERROR, log_to_driver=False)
        except ConnectionError as exc:
            raise BatchError(
                f"no Ray cluster at {address or 'auto'} ({exc}); start one with 'ray start --head', "
                "or pass --ray-address HOST:PORT"
            ) from None
    handles: list[Any] = []
    try:
        cpus = float(ray.cluster_resources().get("CPU", 0))
        if cpus < options.concurrency:
            raise BatchError(
                f"the Ray cluster has {cpus:g} CPUs and --concurrency {options.concurrency} needs "
                "one per worker; lower --concurrency or add nodes"
            )
        actor = ray.remote(BatchActor).options(
            num_cpus=1, max_restarts=-1, max_task_retries=0, max_concurrency=1, scheduling_strategy="SPREAD"
        )
        handles = [actor.remote(spec) for _ in range(options.concurrency)]
        workers = [RayWorker(handle, ray) for handle in handles]
        await _start_all(workers)
        yield workers
    finally:
        await _stop(ray, handles)
        if connected_here:
            ray.shutdown()


async def _start_all(workers: list[RayWorker]) -> None:
    """Start every worker at once; the first refusal (drift, a missing secret) stops the job."""
    try:
        with anyio.fail_after(START_TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                for worker in workers:
                    tg.start_soon(worker.start)
    except* BatchError as group:
        raise group.exceptions[0] from None
    except* TimeoutError:
        raise BatchError(
            f"the Ray workers did not start within {START_TIMEOUT_S:g} s; see 'ray status'"
        ) from None


async def _stop(ray: ModuleType, handles: list[Any]) -> None:
    """Close each actor's engine (its sandboxes and servers), then end the actor."""
    with anyio.move_on_after(30):
        for handle in handles:
            with contextlib.suppress(Exception):
                await handle.close.remote()
    for handle in handles:
        with contextlib.suppress(Exception):
            ray.kill(handle, no_restart=True)
