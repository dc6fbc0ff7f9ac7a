"""One program over many items: concurrent, resumable, with no duplicate side effects.

Each item is one run of the program with ``INPUT`` bound to the item, in a sandbox from the warm
pool, through the same broker, gates and ledger as ``codemode run``. Its side-effecting calls
get idempotency keys derived from the job, the item, the tool, the arguments and the call's
occurrence, so running an item again (a retry, a resume after a crash, a re-run of the job)
replays every call that completed instead of sending it again. A call whose outcome is unknown
is never re-sent: its item is ``unknown`` until ``codemode ledger reconcile`` settles it.

Dispatch streams: items are read from the job store a page at a time into a bounded channel,
so neither the input nor the job's size decides the memory used.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from codemode.batch._inputs import BadLine, InputDigest, Item, json_problem, keyed, read_items
from codemode.batch._jobs import (
    DuplicateKeyError,
    ItemStatus,
    JobBusyError,
    JobRecord,
    JobStore,
    StoredItem,
)
from codemode.batch._naming import LEGACY_MARK, default_job_id, item_scope
from codemode.broker import RunLimits
from codemode.errors import CodemodeError, ConfigError, LedgerError, PolicyError, SandboxError
from codemode.host import ConnectionState
from codemode.ledger import StoreError

if TYPE_CHECKING:
    from codemode.config import PolicyConfig
    from codemode.engine import CodeMode, RunResult

log = logging.getLogger(__name__)

PAUSE_S = (0.5, 15.0)
"""The first and the longest pause of an item while the ledger is unreachable or its worker lost."""
MAX_WORKER_LOSSES = 6
"""Losses of an item's worker within one attempt before that attempt fails (about 30 s of pauses)."""
LEDGER_OUTAGE_LIMIT_S = 300.0
"""How long one item waits for the ledger before the job stops (and can be resumed)."""
MAX_BAD_LINES = 100
"""Skipped input lines a job records one by one; the rest are counted in one more entry."""
SERVER_OUTAGE_LIMIT_S = 120.0
"""How long one item waits for a server that is down (restarting) before the job stops."""


class BatchError(CodemodeError):
    """The job cannot start: bad input, a duplicate key, a program that does not compile, a
    resume that does not match the job it names."""


@dataclass(frozen=True)
class BatchOptions:
    job_id: str | None = None
    """None: named after the program, the input file, ``key`` and who runs it (so the same job
    run again resumes), or a random id for items that are not a file."""
    key: str | None = None
    """The field that identifies an item (default: its line number)."""
    concurrency: int = 4
    max_attempts: int = 3
    resume: bool = False
    retry_unknown: bool = False
    """Run ``unknown`` items again (after ``codemode ledger reconcile`` settled their calls)."""
    strict: bool = False
    """A malformed input line fails the job before anything runs (default: reported, skipped)."""
    verify: str | None = None
    """A read-only program that gets ``INPUT`` and ``RESULT`` and must return True."""
    wall_time_s: float | None = None
    limits: RunLimits = field(default_factory=RunLimits)
    principal: str | None = None
    tenant: str | None = None


@dataclass(frozen=True)
class ItemResult:
    key: str
    line: int
    status: ItemStatus
    attempts: int
    run_id: str | None
    result: Any = None
    error: str | None = None
    calls: int = 0
    duration_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "status": self.status, "run_id": self.run_id}
        out["result" if self.error is None else "error"] = self.result if self.error is None else self.error
        out.update(calls=self.calls, duration_ms=round(self.duration_ms, 1), attempts=self.attempts)
        return out


@dataclass
class BatchJob:
    """A prepared job: registered items, ready to run (see :func:`prepare_job`)."""

    job_id: str
    store: JobStore
    bad_lines: list[dict[str, Any]]
    resumed: bool
    identity: tuple[str, str] | None = None
    """The principal and tenant checked against the job when it was prepared (with a policy)."""


def program_digest(program: str, verify: str | None) -> str:
    return hashlib.sha256(f"{program}\x00{verify or ''}".encode()).hexdigest()


def check_compiles(source: str, name: str) -> None:
    try:
        compile(source, name, "exec", dont_inherit=True, flags=0x2000)  # PyCF_ALLOW_TOP_LEVEL_AWAIT
    except SyntaxError as exc:
        raise BatchError(f"{name} does not compile (line {exc.lineno}): {exc.msg}") from exc


def check_identity(store: JobStore, job_id: str, identity: tuple[str, str], *, resumed: bool) -> None:
    """Record who the job runs as, or refuse another principal or tenant than the one recorded.

    The derived idempotency keys are scoped to the principal and tenant: under another one, no
    completed call of the job would replay, and every write would be sent again.
    """
    principal, tenant = identity
    job, bound = store.bind_identity(job_id, principal, tenant)
    if resumed and bound:
        # Started by a version that did not record it: the first resume binds it.
        log.warning("job %r is bound from now on to principal %r in tenant %r", job_id, principal, tenant)
    if (job.principal, job.tenant) != identity:
        raise BatchError(
            f"job {job_id!r} was started as principal {job.principal!r} in tenant {job.tenant!r}, "
            f"not {principal!r} in {tenant!r}: as another principal or tenant its completed writes "
            f"would be sent again. Resume it with --principal {job.principal} --tenant {job.tenant} "
            "(in Python: BatchOptions(principal=..., tenant=...)), or start a new job with another --job-id"
        )


def prepare_job(
    store: JobStore,
    program: str,
    items: Path | Iterable[Mapping[str, Any]],
    options: BatchOptions,
    policy: PolicyConfig | None = None,
) -> BatchJob:
    """Check the programs, then create or resume the job and register its items before any runs.

    With ``policy``, the job's principal and tenant are resolved and recorded (or, on a resume,
    checked) here; :func:`run_job` does it otherwise (or for another policy), before any item runs.
    """
    check_compiles(program, "the program")
    if options.verify is not None:
        check_compiles(options.verify, "the verify program")
    digest = program_digest(program, options.verify)
    identity = policy.identity(options.principal, options.tenant) if policy is not None else None
    job_id = options.job_id
    if job_id is None:
        # Named by what it runs, so that the same command run again (after a kill) resumes the
        # job instead of starting another one that would send every write again.
        job_id = (
            default_job_id(digest, items, options.key, identity or (options.principal, options.tenant))
            if isinstance(items, Path)
            else "job_" + secrets.token_hex(6)
        )
    try:
        store.claim(job_id)
    except JobBusyError as exc:
        raise BatchError(str(exc)) from None
    existing = store.job(job_id)
    if options.resume and existing is None:
        raise BatchError(f"there is no job {job_id!r} to resume; run without --resume to start it")
    if existing is not None and existing.registered and store.counts(job_id):
        if existing.program_digest != digest:
            raise BatchError(
                f"job {job_id!r} was started with another program (or verify program); "
                "resume it with the same files, or start a new job with another --job-id"
            )
        check_resume_options(existing, options)
        if not existing.key_recorded and LEGACY_MARK in job_id:
            raise BatchError(
                f"job {job_id!r} was started by an earlier version of codemode, and its id holds "
                f"{LEGACY_MARK!r}, which this version gives other idempotency keys: resumed here, it "
                "would send its completed writes again. Finish it with the version that started it"
            )
        if identity is not None:
            check_identity(store, job_id, identity, resumed=True)
        if isinstance(items, Path):
            found = InputDigest()
            for _ in read_items(items, options.key, found):
                pass
            if existing.inputs_digest != found.hexdigest():
                raise BatchError(f"the inputs of job {job_id!r} changed since it started; use a new --job-id")
        return BatchJob(job_id, store, existing.bad_lines, resumed=True, identity=identity)
    # A job whose registration was cut short starts it over, so no item of an earlier attempt
    # (perhaps of another input) stays behind.
    store.begin_registration(job_id, digest, *(identity or (None, None)), key_field=options.key)
    input_digest = InputDigest()
    bad: list[dict[str, Any]] = []
    good = skipped = 0

    def good_items() -> Iterable[tuple[str, int, dict[str, Any]]]:
        source = (
            read_items(items, options.key, input_digest)
            if isinstance(items, Path)
            else (_keyed_mapping(index, item, options.key) for index, item in enumerate(items, start=1))
        )
        for entry in source:
            if isinstance(entry, BadLine):
                if options.strict:
                    raise BatchError(f"input line {entry.line}: {entry.reason} (--strict)")
                nonlocal skipped
                skipped += 1
                if len(bad) < MAX_BAD_LINES:  # a million bad lines must not become a million rows
                    bad.append({"line": entry.line, "reason": entry.reason})
                continue
            nonlocal good
            good += 1
            yield entry.key, entry.line, entry.data

    try:
        store.register(job_id, good_items())
    except DuplicateKeyError as exc:
        raise BatchError(f"{exc}; every item needs its own key (see --key)") from exc
    if good == 0 and bad:
        # Most likely a wrong --key: left unregistered, the job starts over when run again
        # (with the same id) instead of resuming with nothing to run.
        raise BatchError(
            f"no input line could be read as an item: all {skipped} were skipped (line {bad[0]['line']}: "
            f"{bad[0]['reason']}); check --key and the input file, then run the command again"
        )
    if skipped > len(bad):
        bad.append(
            {"line": bad[-1]["line"], "reason": f"and {skipped - len(bad)} more lines skipped, not listed"}
        )
    store.finish_registration(job_id, input_digest.hexdigest(), bad)
    return BatchJob(job_id, store, bad, resumed=existing is not None, identity=identity)


def check_resume_options(job: JobRecord, options: BatchOptions) -> None:
    """Refuse to resume ``job`` with options that would register or key its items otherwise."""
    if job.key_recorded and job.key_field != options.key:

        def name(key: str | None) -> str:
            return "no --key (line numbers)" if key is None else f"--key {key}"

        raise BatchError(
            f"job {job.job_id!r} was started with {name(job.key_field)}, not {name(options.key)}: "
            "its items are keyed by it, and under other keys their completed writes would be sent "
            "again. Resume it with the same --key, or start a new job with another --job-id"
        )
    if options.strict and job.bad_lines:
        first = job.bad_lines[0]
        raise BatchError(
            f"input line {first['line']}: {first['reason']} (--strict; job {job.job_id!r} skipped "
            f"{len(job.bad_lines)} line(s) when it started)"
        )


def _keyed_mapping(index: int, item: Mapping[str, Any], key: str | None) -> Item | BadLine:
    if not isinstance(item, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
        return BadLine(index, "an item must be a mapping")
    data = dict(item)
    problem = json_problem(data)
    return BadLine(index, problem) if problem is not None else keyed(data, index, key)


class ItemWorker(Protocol):
    """One worker slot: runs one item at a time (a local session, or a Ray actor)."""

    async def run(self, item: StoredItem, attempt: int) -> ItemResult: ...


class WorkerLost(CodemodeError):
    """The worker died while it ran an item (a killed process or node): the item runs again.

    Running it again is safe: its completed calls replay from the ledger, and a call that was
    sent and never answered is ``unknown`` and is not sent again.
    """


async def run_on_workers(
    workers: Sequence[ItemWorker], job: BatchJob, options: BatchOptions
) -> AsyncGenerator[ItemResult]:
    """Feed the job's runnable items to ``workers``, one item per worker at a time; yield results.

    The job store is touched only here, by the driver: workers run items and return results.
    The job must have been prepared with the policy (see :func:`prepare_job`), so that its
    principal and tenant were checked against the ones it was started as.
    """
    await anyio.to_thread.run_sync(_check_runs_as_prepared, job, options)
    send_items, receive_items = anyio.create_memory_object_stream[StoredItem](len(workers))
    send_results, receive_results = anyio.create_memory_object_stream[ItemResult](len(workers))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_feed, job, options, send_items)
            async with send_results:
                for worker in workers:
                    tg.start_soon(_work, worker, job, options, receive_items.clone(), send_results.clone())
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
        pages = job.store.runnable(
            job.job_id, max_attempts=options.max_attempts, retry_unknown=options.retry_unknown
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
                if outcome.status != "failed" or attempt >= options.max_attempts:
                    break
                # A failed item runs again at once (its completed calls replay, so nothing is
                # repeated); unknown and unverified items are never retried by themselves.
                await anyio.sleep(min(0.1 * 2**attempt, 2.0))
            stored = StoredItem(
                outcome.key, outcome.line, item.data, outcome.status, attempt, outcome.run_id,
                outcome.result, outcome.error, outcome.calls, outcome.duration_ms,
            )  # fmt: skip
            await anyio.to_thread.run_sync(partial(job.store.finish, job.job_id, stored))
            await results.send(outcome)


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


async def run_item(
    engine: CodeMode,
    program: str,
    job_id: str,
    item: StoredItem,
    attempt: int,
    options: BatchOptions,
    session_id: str | None = None,
) -> ItemResult:
    """One item: the program, then (if it succeeded) the verify program; the item's status."""
    run = partial(
        engine.run,
        principal=options.principal,
        tenant=options.tenant,
        wall_time_s=options.wall_time_s,
        inputs=item.data,
        session_id=session_id,
        fresh_namespace=True,
    )
    waited, pause = 0.0, PAUSE_S[0]
    while True:
        before = {status.name: status.reconnects for status in engine.statuses()}
        result = await run(program, idempotency_scope=item_scope(job_id, item.key), limits=options.limits)
        down = (
            [] if result.status == "ok" or result.unknown_outcomes else _servers_down(engine, result, before)
        )
        if not down:
            break
        # The item failed on a server that is down (crashed, restarting): not the item's fault,
        # so it runs again, same attempt, once the server is back; its completed calls replay.
        if waited >= SERVER_OUTAGE_LIMIT_S:
            raise BatchError(
                f"server {down[0]!r} has been down for {waited:.0f} s; the job stops here. "
                "Run it again with --resume once the server is back"
            )
        log.warning("item %s: server %r is down; running it again in %.1f s", item.key, down[0], pause)
        await anyio.sleep(pause)
        waited, pause = waited + pause, min(pause * 2, PAUSE_S[1])

    def made(
        status: ItemStatus, error: str | None = None, duration_ms: float = result.duration_ms
    ) -> ItemResult:
        value = result.result if status in ("done", "unverified") else None
        return ItemResult(
            item.key, item.line, status, attempt, result.run_id, value, error, result.calls, duration_ms
        )

    if result.unknown_outcomes:
        return made(
            "unknown",
            f"{result.unknown_outcomes} call(s) with an unknown outcome; see 'codemode ledger reconcile'",
        )
    if result.status != "ok":
        return made("failed", _error_text(result))
    if result.result_truncated:
        # What came back is the start of the value's text, not the value: stored as done, it
        # would pass for the item's result (and reach the verify program as RESULT).
        cap = engine.config.sandbox.result_bytes
        return made(
            "failed", f"result over result_bytes ({cap} bytes): raise [sandbox] result_bytes or return less"
        )
    if options.verify is None:
        return made("done")
    check = await run(options.verify, bindings={"RESULT": result.result}, read_only=True)
    duration = result.duration_ms + check.duration_ms
    if check.status == "ok" and check.result is True:
        return made("done", duration_ms=duration)
    why = (
        _error_text(check)
        if check.status != "ok"
        else f"the verify program returned {check.result!r}, not True"
    )
    return made("unverified", why, duration)


def _servers_down(engine: CodeMode, result: RunResult, reconnects: Mapping[str, int]) -> list[str]:
    """The servers that the run's error names (a call to one denied as not listed, or failed as
    disconnected) and that are down now or were during the run (they reconnected since, given
    their ``reconnects`` before it: a quick restart is over before the run's end is seen); an
    error that names none is the item's own."""
    text = _error_text(result)
    return [
        status.name
        for status in engine.statuses()
        if (
            status.state in (ConnectionState.CONNECTING, ConnectionState.FAILED)
            or status.reconnects > reconnects.get(status.name, status.reconnects)
        )
        and (_names_tool_of(status.name, text) or f"server {status.name!r}" in text)
    ]


def _names_tool_of(server: str, text: str) -> bool:
    """Whether ``text`` names a tool of ``server`` (``crm/add_note``), not of ``mycrm`` and not a
    path of some URL (``https://x/crm/v1``)."""
    return re.search(rf"(?<![\w./:-]){re.escape(server)}/\w", text) is not None


def _error_text(result: RunResult) -> str:
    if result.error is None:
        return "the run failed"
    return f"{result.error.type}: {result.error.message}"
