"""Dispatch: a job's runnable items fed to its workers, each item's outcome recorded.

Items are read from the job store a page at a time into a bounded channel, so neither the input
nor the job's size decides the memory used. The driver alone touches the job store (and the
``--out`` file); workers, local sessions or Ray actors, run items and return their results. A
failed item is retried up to ``max_attempts`` in the same run, unless it would fail the same way
again (see :mod:`codemode.batch._reasons`); an outage of the ledger or a lost worker is waited
out without costing the item an attempt.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Sequence
from typing import cast

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from codemode.batch._jobs import StoredItem
from codemode.batch._out import ResultsFile
from codemode.batch._runner import BatchError, BatchJob, BatchOptions, ItemResult, ItemWorker, WorkerLost
from codemode.errors import ConfigError, LedgerError, PolicyError, SandboxError
from codemode.ledger import StoreError

log = logging.getLogger(__name__)

PAUSE_S = (0.5, 15.0)
"""The first and the longest pause of an item while the ledger is unreachable or its worker lost."""
MAX_WORKER_LOSSES = 6
"""Losses of an item's worker within one attempt before that attempt fails (about 30 s of pauses)."""
LEDGER_OUTAGE_LIMIT_S = 300.0
"""How long one item waits for the ledger before the job stops (and can be resumed)."""


async def run_on_workers(
    workers: Sequence[ItemWorker], job: BatchJob, options: BatchOptions
) -> AsyncGenerator[ItemResult]:
    """Feed the job's runnable items to ``workers``, one item per worker at a time; yield results.

    The job store is touched only here, by the driver: workers run items and return results.
    The job must have been prepared with the policy (see :func:`prepare_job`), so that its
    principal and tenant were checked against the ones it was started as.
    """
    await anyio.to_thread.run_sync(_check_runs_as_prepared, job, options)
    out = ResultsFile(options.out) if options.out is not None else None
    if out is not None:
        await anyio.to_thread.run_sync(out.begin, job.store, job.job_id, options.runnable())
    send_items, receive_items = anyio.create_memory_object_stream[StoredItem](len(workers))
    send_results, receive_results = anyio.create_memory_object_stream[ItemResult](len(workers))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_feed, job, options, send_items)
            async with send_results:
                for worker in workers:
                    tg.start_soon(
                        _work, worker, job, options, out, receive_items.clone(), send_results.clone()
                    )
            receive_items.close()
            async with receive_results:
                async for result in receive_results:
                    yield result
    except* BatchError as group:
        # A worker that refuses (its node's tools drifted) stops the job with its own message.
        raise group.exceptions[0] from None
    except* GeneratorExit:
        # The reader stopped early (aclose): the task group cancelled the items in progress
        # (they stay 'running', and a resume runs them again) and wrapped the exit in a group.
        raise GeneratorExit from None
    finally:
        if out is not None:
            # Here, not in a thread: this also runs while the job is being cancelled (Ctrl-C).
            try:
                out.end(job.store, job.job_id)
            except OSError as exc:
                log.warning("%s keeps its lines in the order the items settled: %s", out.path, exc)


def _check_runs_as_prepared(job: BatchJob, options: BatchOptions) -> None:
    """Fail closed unless the workers run as the job's recorded principal and tenant: under
    another identity none of its completed calls would replay, and every write would be sent again."""
    if job.identity is None:
        raise BatchError(
            f"job {job.job_id!r} was prepared without a policy, so who it runs as was not checked: "
            "pass the policy to prepare_job(..., policy=config.policy), or run it with run_job"
        )
    record = job.store.job(job.job_id)
    recorded = None if record is None else (record.principal, record.tenant)
    asked = (options.principal or job.identity[0], options.tenant or job.identity[1])
    if recorded != job.identity or asked != job.identity:
        other = (
            f"its record says {recorded!r}" if recorded != job.identity else f"the options ask for {asked!r}"
        )
        raise BatchError(
            f"job {job.job_id!r} was prepared to run as principal {job.identity[0]!r} in tenant "
            f"{job.identity[1]!r}, but {other}: prepare and run it with the same principal and tenant"
        )


async def _feed(job: BatchJob, options: BatchOptions, send: MemoryObjectSendStream[StoredItem]) -> None:
    async with send:
        runs = options.runnable()
        pages = job.store.runnable(
            job.job_id,
            max_attempts=runs.max_attempts,
            retry_unknown=runs.retry_unknown,
            reverify=runs.reverify,
        )
        while True:
            item = await anyio.to_thread.run_sync(next, pages, None)
            if item is None:
                return
            try:
                await send.send(item)  # blocks while every worker is busy: backpressure
            except anyio.BrokenResourceError:
                return  # every worker stopped (one refused to run items): nothing more to feed


async def _work(
    worker: ItemWorker,
    job: BatchJob,
    options: BatchOptions,
    out: ResultsFile | None,
    items: MemoryObjectReceiveStream[StoredItem],
    results: MemoryObjectSendStream[ItemResult],
) -> None:
    async with items, results:
        async for item in items:
            while True:
                attempt = await anyio.to_thread.run_sync(job.store.start, job.job_id, item.key)
                try:
                    outcome = await _run_through_outages(worker, item, attempt)
                except WorkerLost as exc:
                    outcome = ItemResult(item.key, item.line, "failed", attempt, None, error=str(exc))
                except Exception as exc:
                    if _stops_the_job(exc):
                        raise
                    # Something in this item's data (a value the sandbox channel cannot carry)
                    # must not end the job, nor every resume of it.
                    log.warning("item %s could not run", item.key, exc_info=exc)
                    outcome = ItemResult(
                        item.key,
                        item.line,
                        "failed",
                        attempt,
                        None,
                        error=f"the item could not run: {_leaf(exc)}",
                    )
                if outcome.status != "failed" or outcome.repeats or attempt >= options.max_attempts:
                    break
                # A failed item runs again at once (its completed calls replay, so nothing is
                # repeated) unless it would fail the same way (a policy denial, say); unknown and
                # unverified items are never retried by themselves.
                await anyio.sleep(min(0.1 * 2**attempt, 2.0))
            stored = StoredItem(
                outcome.key, outcome.line, item.data, outcome.status, attempt, outcome.run_id,
                outcome.result, outcome.error, outcome.calls, outcome.duration_ms,
            )  # fmt: skip
            await anyio.to_thread.run_sync(_settle, job, stored, outcome, out)
            await results.send(outcome)


def _settle(job: BatchJob, stored: StoredItem, outcome: ItemResult, out: ResultsFile | None) -> None:
    """Record an item's outcome: in ``--out`` first, so that the file never lacks an item that
    the job store calls settled (a kill between the two leaves the item to run again)."""
    if out is not None:
        out.add(outcome)
    job.store.finish(job.job_id, stored)


_STOPS_THE_JOB = (BatchError, LedgerError, SandboxError, PolicyError, ConfigError)
"""Errors of codemode's own machinery, not of one item: they stop the job, which can resume."""


def _stops_the_job(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(_STOPS_THE_JOB) is not None
    return isinstance(exc, _STOPS_THE_JOB)


def _leaf(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup):
        exc = cast(BaseException, exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}"


async def _run_through_outages(worker: ItemWorker, item: StoredItem, attempt: int) -> ItemResult:
    """Run the item; while the ledger cannot be reached, or the worker was lost and is coming
    back (a killed Ray actor takes seconds to restart), pause and run it again, same attempt.

    Neither is the item's fault, so neither costs an attempt. Running the item again is safe:
    calls the ledger recorded replay, one it could not record was never sent, and one that was
    in flight on a lost worker is ``unknown`` and not sent again.
    """
    waited, pause, losses = 0.0, PAUSE_S[0], 0
    while True:
        try:
            return await worker.run(item, attempt)
        except WorkerLost as exc:
            losses += 1
            if losses >= MAX_WORKER_LOSSES:
                raise WorkerLost(f"{exc}; lost {losses} times, the last try of this attempt") from None
            log.warning("item %s: %s; running it again in %.1f s", item.key, exc, pause)
        except StoreError as exc:
            if waited >= LEDGER_OUTAGE_LIMIT_S:
                raise BatchError(
                    f"the ledger has been unreachable for {waited:.0f} s ({exc}); the job stops here. "
                    "Run it again with --resume once the ledger is back"
                ) from None
            log.warning("item %s: the ledger is unreachable (%s); pausing %.1f s", item.key, exc, pause)
        await anyio.sleep(pause)
        waited, pause = waited + pause, min(pause * 2, PAUSE_S[1])
