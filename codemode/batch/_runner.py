"""One program over many items: concurrent, resumable, with no duplicate side effects.

A job is prepared here before anything runs: its programs compiled, its items registered in the
job store (a duplicate key refused up front), a resume checked against the job it names. Its
items then run through :mod:`codemode.batch._dispatch` (feeding workers) and
:mod:`codemode.batch._item` (one item's run).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from codemode._run_usage import RunUsage
from codemode.batch._inputs import BadLine, InputDigest, Item, json_problem, keyed, read_items
from codemode.batch._jobs import (
    DuplicateKeyError,
    ItemStatus,
    JobBusyError,
    JobRecord,
    JobStore,
    Runnable,
    StoredItem,
)
from codemode.batch._naming import LEGACY_MARK, default_job_id
from codemode.broker import RunLimits
from codemode.errors import CodemodeError

if TYPE_CHECKING:
    from codemode.config import PolicyConfig

log = logging.getLogger(__name__)

MAX_BAD_LINES = 100
"""Skipped input lines a job records one by one; the rest are counted in one more entry."""


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
    reverify: bool = False
    """Also check ``unverified`` items again: their verify program only, on their stored result
    (their program, and so their writes, do not run again). Needs ``verify``."""
    compensate: bool = False
    """Undo the side effects of each item that ends failed or unverified, with the calls of
    ``[compensation]`` (see :mod:`codemode.batch._compensation`)."""
    out: Path | None = None
    """Write one JSON line per settled item here, kept true through a Ctrl-C or a kill (see
    :mod:`codemode.batch._out`)."""

    def runnable(self) -> Runnable:
        """Which items of the job a run with these options runs."""
        return Runnable(self.max_attempts, self.retry_unknown, self.reverify)


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
    repeats: bool = False
    """A failure that another attempt would repeat (a policy denial, the program's own error
    before any call): it gets no more attempts in this run."""
    usage: RunUsage | None = None
    """What the item's program run used of its sandbox (None: not run now, or not measured)."""
    broker_cpu_s: float | None = None
    """The broker's CPU seconds for that run."""
    compensation: str | None = None
    """How undoing the item's side effects ended (compensated, compensation failed, partial);
    None when it was not compensated or made none."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "status": self.status, "run_id": self.run_id}
        out["result" if self.error is None else "error"] = self.result if self.error is None else self.error
        out.update(calls=self.calls, duration_ms=round(self.duration_ms, 1), attempts=self.attempts)
        if self.compensation is not None:
            out["compensation"] = self.compensation
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

    @property
    def skipped(self) -> int:
        """How many input lines were skipped (``bad_lines`` lists the first ones)."""
        return sum(int(bad.get("count", 1)) for bad in self.bad_lines)


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
    elif options.reverify:
        raise BatchError("--reverify checks items with the job's verify program: give it with --verify")
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
        more = skipped - len(bad)
        bad.append(
            {"line": bad[-1]["line"], "reason": f"and {more} more lines skipped, not listed", "count": more}
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
