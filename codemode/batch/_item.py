"""One item of a batch job: its program run (through a server's restart), the verify program,
and what the outcome makes of the item (done, failed, unknown or unverified).

Each item is one run of the program with ``INPUT`` bound to the item, in a sandbox from the warm
pool, through the same broker, gates and ledger as ``codemode run``. Its side-effecting calls
get idempotency keys derived from the job, the item, the tool, the arguments and the call's
occurrence, so running an item again (a retry, a resume after a crash, a re-run of the job)
replays every call that completed instead of sending it again. A call whose outcome is unknown
is never re-sent: its item is ``unknown`` until ``codemode ledger reconcile`` settles it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING

import anyio

from codemode.batch._compensation import compensated
from codemode.batch._jobs import ItemStatus, StoredItem
from codemode.batch._naming import item_scope
from codemode.batch._reasons import failure_of, run_error
from codemode.batch._runner import BatchError, BatchOptions, ItemResult
from codemode.engine import check_result
from codemode.host import ConnectionState

if TYPE_CHECKING:
    from codemode.engine import CodeMode, RunResult

log = logging.getLogger(__name__)

PAUSE_S = (0.5, 15.0)
"""The first and the longest pause of an item while a server it called is down."""
SERVER_OUTAGE_LIMIT_S = 120.0
"""How long one item waits for a server that is down (restarting) before the job stops."""


async def run_item(
    engine: CodeMode,
    program: str,
    job_id: str,
    item: StoredItem,
    attempt: int,
    options: BatchOptions,
    session_id: str | None = None,
) -> ItemResult:
    """One item: the program, then (if it succeeded) the verify program; the item's status.

    With ``options.reverify``, an ``unverified`` item runs its verify program only, on the
    result stored from its run: its writes are not made again, nor even replayed. With
    ``options.compensate``, an item that ends failed or unverified has its writes undone.
    """
    result = await _run_item(engine, program, job_id, item, attempt, options, session_id)
    return await compensated(engine, result, options)


async def _run_item(
    engine: CodeMode,
    program: str,
    job_id: str,
    item: StoredItem,
    attempt: int,
    options: BatchOptions,
    session_id: str | None,
) -> ItemResult:
    run = partial(
        engine.run,
        principal=options.principal,
        tenant=options.tenant,
        wall_time_s=options.wall_time_s,
        inputs=item.data,
        session_id=session_id,
        fresh_namespace=True,
        compensate=False,  # not [policy] compensate: an attempt a retry follows is not undone (see run_item)
    )
    if options.reverify and item.status == "unverified":
        return await _reverify(run, item, attempt, options)
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
        status: ItemStatus,
        error: str | None = None,
        duration_ms: float = result.duration_ms,
        repeats: bool = False,
    ) -> ItemResult:
        value = result.result if status in ("done", "unverified") else None
        return ItemResult(
            item.key,
            item.line,
            status,
            attempt,
            result.run_id,
            value,
            error,
            result.calls,
            duration_ms,
            repeats,
            result.usage,
            result.broker_cpu_s,
        )

    if result.unknown_outcomes:
        return made(
            "unknown",
            f"{result.unknown_outcomes} call(s) with an unknown outcome; see 'codemode ledger reconcile'",
        )
    if result.status != "ok":
        failure = failure_of(result)
        return made("failed", failure.text, repeats=failure.repeats)
    if result.result_truncated:
        # What came back is the start of the value's text, not the value: stored as done, it
        # would pass for the item's result (and reach the verify program as RESULT).
        cap = engine.config.sandbox.result_bytes
        return made(
            "failed", f"result over result_bytes ({cap} bytes): raise [sandbox] result_bytes or return less"
        )
    if options.verify is None:
        return made("done")
    why, check_ms = await check_result(run, options.verify, result.result)
    return made("done" if why is None else "unverified", why, result.duration_ms + check_ms)


async def _reverify(
    run: Callable[..., Awaitable[RunResult]], item: StoredItem, attempt: int, options: BatchOptions
) -> ItemResult:
    """Check an ``unverified`` item again: its result is the one stored from its run."""
    assert options.verify is not None, "prepare_job refuses reverify without a verify program"
    why, check_ms = await check_result(run, options.verify, item.result)
    return ItemResult(
        item.key,
        item.line,
        "done" if why is None else "unverified",
        attempt,
        item.run_id,
        item.result,
        why,
        item.calls,
        item.duration_ms + check_ms,
    )


def _servers_down(engine: CodeMode, result: RunResult, reconnects: Mapping[str, int]) -> list[str]:
    """The servers that the run's error names (a call to one denied as not listed, or failed as
    disconnected) and that are down now or were during the run (they reconnected since, given
    their ``reconnects`` before it: a quick restart is over before the run's end is seen); an
    error that names none is the item's own."""
    text = run_error(result)
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
