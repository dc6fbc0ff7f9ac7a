"""Batch items on this machine: one sandbox session of an engine per worker slot.

The Ray counterpart is :mod:`codemode.batch._ray`; both feed :func:`run_on_workers`, which
alone touches the job store.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import anyio

from codemode.batch._dispatch import run_on_workers
from codemode.batch._item import run_item
from codemode.batch._jobs import StoredItem
from codemode.batch._runner import BatchError, BatchJob, BatchOptions, ItemResult, check_identity
from codemode.errors import SandboxError

if TYPE_CHECKING:
    from codemode.config import Config
    from codemode.engine import CodeMode


class EngineWorker:
    """A worker slot of this process: one sandbox session of ``engine``, reused item after item
    with a fresh namespace each time (a cold sandbox per item would cost more than the item)."""

    def __init__(self, engine: CodeMode, program: str, job_id: str, options: BatchOptions) -> None:
        self._engine, self._program, self._job_id, self._options = engine, program, job_id, options
        self._session: str | None = None

    async def run(self, item: StoredItem, attempt: int) -> ItemResult:
        if self._session is None:
            options = self._options
            self._session = await self._engine.open_session(
                principal=options.principal, tenant=options.tenant, hold_pool_slot=True
            )
        return await run_item(
            self._engine, self._program, self._job_id, item, attempt, self._options, self._session
        )

    async def close(self) -> None:
        """Close the session: on an engine that outlives the job, its sandbox (which the warm
        pool does not replace while it is held) would otherwise stay until it idles out."""
        session, self._session = self._session, None
        if session is None:
            return
        options = self._options
        with contextlib.suppress(SandboxError):  # the engine stopped: its sessions went with it
            await self._engine.close_session(session, principal=options.principal, tenant=options.tenant)


async def run_job(
    engine: CodeMode, program: str, job: BatchJob, options: BatchOptions
) -> AsyncGenerator[ItemResult]:
    """Run the job's runnable items with ``options.concurrency`` at a time; yield each result."""
    check_sessions(engine.config, options.concurrency)
    identity = engine.config.policy.identity(options.principal, options.tenant)
    if job.identity != identity:  # not checked when it was prepared
        await anyio.to_thread.run_sync(
            partial(check_identity, job.store, job.job_id, identity, resumed=job.resumed)
        )
        job = replace(job, identity=identity)
    workers = [EngineWorker(engine, program, job.job_id, options) for _ in range(options.concurrency)]
    try:
        # Closed here, not left to the garbage collector: its task group must end in this task.
        async with contextlib.aclosing(run_on_workers(workers, job, options)) as results:
            async for result in results:
                yield result
    finally:
        with anyio.CancelScope(shield=True):
            for worker in workers:
                await worker.close()


def check_sessions(config: Config, concurrency: int) -> None:
    """Refuse a concurrency that the engine's sandbox sessions cannot hold: each worker keeps one."""
    if concurrency > config.serve.max_sessions:
        raise BatchError(
            f"concurrency {concurrency} needs as many sandbox sessions; raise [serve] max_sessions "
            f"(now {config.serve.max_sessions}), or run the job with the config instead of a running "
            "engine (codemode.batch.run_batch), which sizes the engine it starts for the job"
        )
