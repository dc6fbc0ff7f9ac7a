"""The one batch driver: what ``codemode batch`` and ``CodeMode.batch`` both run.

:func:`run_batch` opens the job store, prepares the job (always against the policy, so who it
runs as is checked before anything runs), picks the workers - sessions of an engine on this
machine, or actors on a Ray cluster - and streams each item's result. The command line keeps
only its options, the progress bar and the summary; the Python API only delegates.

Given a config, the driver starts the engine the job runs on and sizes it for the job: one warm
sandbox and one session per concurrent item. Given a running engine, it runs the job there and
sizes nothing: that engine's limits are its owner's (a ``codemode serve`` may share it), so a
concurrency it cannot hold is refused before any item is registered.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from codemode.batch._dispatch import run_on_workers
from codemode.batch._jobs import open_job_store
from codemode.batch._local import check_sessions, run_job
from codemode.batch._ray import ray_workers
from codemode.batch._runner import BatchError, BatchJob, BatchOptions, ItemResult, prepare_job
from codemode.config import Config

if TYPE_CHECKING:
    from codemode.engine import CodeMode

Workers = Literal["local", "ray"]
"""Where items run: sessions of an engine on this machine, or actors on a Ray cluster."""

Items = str | os.PathLike[str] | Iterable[Mapping[str, Any]]
"""A ``.jsonl``/``.csv`` file (its path), or the items themselves."""

StartWorkers = Callable[[contextlib.AsyncExitStack], Awaitable[AsyncGenerator[ItemResult]]]


class BatchRun:
    """A prepared job and its results. :attr:`job` is known before any item runs (its id,
    whether it resumed, the input lines it skipped); :meth:`results` starts the workers and
    yields each item's result as it finishes."""

    def __init__(self, job: BatchJob, stack: contextlib.AsyncExitStack, start: StartWorkers) -> None:
        self.job = job
        self._stack = stack
        self._start = start
        self._results: AsyncGenerator[ItemResult] | None = None

    def results(self) -> AsyncIterator[ItemResult]:
        if self._results is not None:
            raise BatchError("a batch run's results stream once; run the job again to resume it")
        self._results = self._stream()
        return self._results

    async def _stream(self) -> AsyncGenerator[ItemResult]:
        async with contextlib.aclosing(await self._start(self._stack)) as results:
            async for result in results:
                yield result

    async def aclose(self) -> None:
        """Stop the results (their caller may have left the loop early) in this task, before
        the workers close: left to the garbage collector, they would end in another task."""
        if self._results is not None:
            await self._results.aclose()


@contextlib.asynccontextmanager
async def run_batch(
    engine_or_config: CodeMode | Config,
    program: str,
    items: Items,
    options: BatchOptions | None = None,
    *,
    workers: Workers | None = None,
    ray_address: str | None = None,
) -> AsyncGenerator[BatchRun]:
    """Prepare the job of running ``program`` once per item, and run it (see :class:`BatchRun`).

    ``items``: a ``.jsonl``/``.csv`` path, or an iterable of mappings. ``workers``: ``local`` or
    ``ray`` (default: ``[batch] engine``); ``ray_address``: the Ray cluster (default: ``[batch]
    ray_address``, else the one this machine belongs to). The job's state lives beside the
    ledger, so the same job started again resumes. Leaving the block stops the workers and
    closes the job store.
    """
    options = options or BatchOptions()
    if isinstance(engine_or_config, Config):
        engine, config = None, sized_for(engine_or_config, options.concurrency)
    else:
        engine, config = engine_or_config, engine_or_config.config
    on_ray = (workers or config.batch.engine) == "ray"
    if engine is not None and not on_ray:
        check_sessions(config, options.concurrency)  # before the job is registered
    source = Path(items) if isinstance(items, str | os.PathLike) else items
    store = await anyio.to_thread.run_sync(open_job_store, config.ledger_path)
    try:
        job = await anyio.to_thread.run_sync(prepare_job, store, program, source, options, config.policy)

        async def start(stack: contextlib.AsyncExitStack) -> AsyncGenerator[ItemResult]:
            if on_ray:
                address = ray_address or config.batch.ray_address
                actors = await stack.enter_async_context(
                    ray_workers(config, program, job.job_id, options, address=address)
                )
                return run_on_workers(actors, job, options)
            local = engine or await _start_engine(stack, config)
            if options.compensate and local.compensation_rules():
                local.check_compensations()  # a rule that cannot work is refused before any item
            return run_job(local, program, job, options)

        async with contextlib.AsyncExitStack() as stack:
            run = BatchRun(job, stack, start)
            try:
                yield run
            finally:
                await run.aclose()
    finally:
        store.close()


async def _start_engine(stack: contextlib.AsyncExitStack, config: Config) -> CodeMode:
    from codemode.engine import CodeMode

    return await stack.enter_async_context(CodeMode(config))


def sized_for(config: Config, concurrency: int) -> Config:
    """``config`` with a warm sandbox and a session for each of ``concurrency`` items at once."""
    sized = config.model_copy(
        update={
            "sandbox": config.sandbox.model_copy(
                update={"pool_size": max(config.sandbox.pool_size, concurrency)}
            ),
            "serve": config.serve.model_copy(
                update={"max_sessions": max(config.serve.max_sessions, concurrency)}
            ),
        }
    )
    return sized.with_origin(config.source, config.base_dir)
