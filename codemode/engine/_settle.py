"""A run's end state once it is over: its check (``verify``), and its compensation when it failed.

The check runs inside the run's scope, so its verdict is in the run's ledger record (``ledger
show`` tells an unverified run from a succeeded one). The compensation runs after the run's end
is recorded: its calls are runs of their own (see :mod:`codemode.engine._compensate`), also when
the run was cancelled (:func:`undone_if_cancelled`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from codemode.engine._compensate import Compensator, compensate_run, run_outcome
from codemode.engine._run_result import RunResult
from codemode.engine._verify import check_result

if TYPE_CHECKING:
    from codemode.broker import Approver, RunScope


def compensation_wanted(engine: Compensator, compensate: bool | None) -> bool:
    """Whether a run compensates (``None``: as ``[policy] compensate`` says); when it does, its
    ``[compensation]`` rules are checked now, before the run makes any side effect."""
    if compensate is None:
        compensate = engine.config.policy.compensate == "on_failure"
    if compensate and engine.compensation_rules():
        engine.check_compensations()
    return compensate


@contextlib.asynccontextmanager
async def undone_if_cancelled(
    engine: Compensator, run_id: str, compensate: bool, approver: Approver | None
) -> AsyncGenerator[None]:
    """Around a run's scope: a run cancelled after side effects is undone too when it compensates
    (its end is recorded first, as ``interrupted``), shielded so the cancellation cannot stop the
    undoing halfway; then the cancellation goes on. A write in flight when it was cancelled is in
    doubt: listed, never undone blindly."""
    try:
        yield
    except anyio.get_cancelled_exc_class():
        if compensate:
            with anyio.CancelScope(shield=True):
                await compensate_run(engine, run_id, approver=approver)
        raise


async def checked(
    run: Callable[..., Awaitable[RunResult]], result: RunResult, verify: str, scope: RunScope
) -> RunResult:
    """``result`` with its check's verdict, noted in the run's record: ``verify`` is run
    read-only on its final value (a failed run is not checked: there is nothing to check)."""
    if result.status != "ok":
        return result
    why, _ = await check_result(run, verify, result.result)
    scope.note(verified=why is None, verify_error=why)
    return result.model_copy(update={"verified": why is None, "verify_error": why})


async def settled(
    engine: Compensator, result: RunResult, *, compensate: bool, approver: Approver | None
) -> RunResult:
    """``result`` with its end state; a failed (or unverified) run's side effects undone first
    when ``compensate``, else only listed (what remains)."""
    if result.status == "ok" and result.verified is not False:
        return result.model_copy(update={"outcome": "succeeded"})
    report = await compensate_run(engine, result.run_id, dry_run=not compensate, approver=approver)
    outcome = run_outcome(result.status, result.verified, report)
    return result.model_copy(update={"outcome": outcome, "compensation": report})
