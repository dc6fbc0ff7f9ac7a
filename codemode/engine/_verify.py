"""The check program after a run (``codemode run --verify``, a batch job's ``--verify``).

It gets the run's final value as ``RESULT`` and must return True. It runs read-only: a call not
known to only read is denied, so a check can never make (or hide) a side effect of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from codemode.engine._run_result import RunResult


async def check_result(
    run: Callable[..., Awaitable[RunResult]], verify: str, value: Any
) -> tuple[str | None, float]:
    """Run ``verify`` with ``run`` on a run's final value: why it does not pass (None: it
    does), and how long it took. ``run`` is the engine's ``run`` with the caller's identity
    (and, for a batch item, ``INPUT``) already bound."""
    check = await run(verify, bindings={"RESULT": value}, read_only=True)
    if check.status == "ok" and check.result is True:
        return None, check.duration_ms
    if check.status != "ok":
        why = "the run failed" if check.error is None else f"{check.error.type}: {check.error.message}"
    else:
        why = f"the verify program returned {check.result!r}, not True"
    return why, check.duration_ms
