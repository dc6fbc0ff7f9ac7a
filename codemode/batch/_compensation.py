"""A batch job's compensation: each item that ends failed or unverified has its side effects
undone (``BatchOptions.compensate``), and the job's summary says how many needed it and how
many were undone (the compensation success rate, next to the success rate).

An item is compensated only once its end is final: a failed item with attempts left runs again
instead, and its next attempt replays its completed calls, which must still be in place. An
``unknown`` item is never compensated: its calls are reconciled first. The tally is read from
the ledger (each item's run and the compensations recorded against its calls), so a resumed
job's summary counts the items compensated by earlier invocations too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from codemode.batch._jobs import StoredItem
from codemode.batch._runner import BatchOptions, ItemResult
from codemode.engine import compensate_run, undo_standing
from codemode.ledger import Ledger

if TYPE_CHECKING:
    from codemode.engine import CodeMode


def is_final_failure(result: ItemResult, options: BatchOptions) -> bool:
    """Whether the item ends here, not done: unverified, or failed with no attempt left that could
    end otherwise."""
    if result.status == "unverified":
        return True
    return result.status == "failed" and (result.repeats or result.attempts >= options.max_attempts)


async def compensated(engine: CodeMode, result: ItemResult, options: BatchOptions) -> ItemResult:
    """``result`` with its compensation's outcome, its run's side effects undone when it ends
    failed or unverified and the job compensates; as it was otherwise."""
    if not options.compensate or result.run_id is None or not is_final_failure(result, options):
        return result
    report = await compensate_run(engine, result.run_id)
    outcome = None if report.outcome == "nothing to undo" else report.outcome
    return dataclasses.replace(result, compensation=outcome)


@dataclass
class CompensationTally:
    """How a job's items that did not succeed stand: those that left side effects (``needed``),
    those fully undone, and the keys of those whose compensation failed."""

    needed: int = 0
    compensated: int = 0
    failed: list[str] = field(default_factory=lambda: list[str]())

    @property
    def rate(self) -> float | None:
        """Compensated of those that needed it (None: none needed it)."""
        return None if not self.needed else self.compensated / self.needed

    def to_json(self) -> dict[str, Any]:
        rate = self.rate
        return {
            "needed": self.needed,
            "compensated": self.compensated,
            "failed": self.failed,
            "rate": None if rate is None else round(rate, 4),
        }


def compensation_tally(ledger: Ledger, items: Iterable[StoredItem]) -> CompensationTally:
    """Count, from the ledger, how the failed and unverified ``items`` stand (see the class)."""
    tally = CompensationTally()
    for item in items:
        if item.status not in ("failed", "unverified") or item.run_id is None:
            continue
        standing = undo_standing(ledger, item.run_id)
        if standing == "nothing to undo":
            continue
        tally.needed += 1
        if standing == "compensated":
            tally.compensated += 1
        elif standing == "compensation failed":
            tally.failed.append(item.key)
    return tally
