"""Quota gate: tool calls and money per minute, hour and day, per principal and per tenant.

The limits of ``[policy.quotas]`` are counted in the ledger's database (:class:`QuotaBook`), so
every replica sharing it counts the same. Like the budget, the quota is checked before consent
(nobody is asked to approve a call the quota would refuse) and taken after it by :meth:`commit`,
which checks again in the same transaction that counts: two replicas cannot both take the last
call. A run's own quotas (runs per window, concurrent runs) are taken where the run starts
(:meth:`RunQuotas.begin_run`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio

from codemode._metrics import active as active_metrics
from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.calls import RunBinding
from codemode.config import QuotaLimits, QuotaPolicy
from codemode.errors import QuotaExceededError
from codemode.ledger import MONEY_UNIT, QuotaBook, QuotaRefusal, SlotLimit, WindowLimit

_T = TypeVar("_T")
_WINDOWS = ("minute", "hour", "day")


def _windows(quotas: QuotaPolicy, binding: RunBinding, measures: tuple[str, ...]) -> list[WindowLimit]:
    """The window limits of ``measures`` that apply to the run's principal and tenant."""
    found: list[WindowLimit] = []
    holders: tuple[tuple[Any, str, QuotaLimits], ...] = (
        ("principal", binding.principal, quotas.for_principal(binding.principal)),
        ("tenant", binding.tenant, quotas.for_tenant(binding.tenant)),
    )
    for holder, name, limits in holders:
        for measure in measures:
            for window in _WINDOWS:
                value = getattr(limits, f"{measure}_per_{window}")
                if value is not None:
                    units = round(value * MONEY_UNIT) if measure == "money" else int(value)
                    found.append(WindowLimit(holder, name, measure, window, units))  # pyright: ignore[reportArgumentType]
    return found


def _slots(quotas: QuotaPolicy, binding: RunBinding) -> list[SlotLimit]:
    principal = quotas.for_principal(binding.principal).concurrent_runs
    tenant = quotas.for_tenant(binding.tenant).concurrent_runs
    return [
        *([] if principal is None else [SlotLimit("principal", binding.principal, principal)]),
        *([] if tenant is None else [SlotLimit("tenant", binding.tenant, tenant)]),
    ]


def _counted(what: str, refusal: QuotaRefusal) -> None:
    metrics = active_metrics()
    if metrics is not None:
        metrics.quota_refusals.labels(what, refusal.quota).inc()


class RunQuotas:
    """Where a run starts: counts it against runs per window and takes a concurrent-run slot, in
    the transaction that records its start; frees the slot when it ends, however it ends."""

    def __init__(self, quotas: QuotaPolicy, book: QuotaBook) -> None:
        self.quotas = quotas
        self.book = book

    def holds_slot(self, binding: RunBinding) -> bool:
        return bool(_slots(self.quotas, binding))

    def begin_run(self, binding: RunBinding, code_digest: str) -> None:
        """Record the run's start, counted; or record its refusal and raise.

        Raises:
            QuotaExceededError: a quota is used up; nothing of the run was started.
        """
        refusal = self.book.begin_run(
            binding,
            code_digest,
            windows=_windows(self.quotas, binding, ("runs",)),
            slots=_slots(self.quotas, binding),
            slot_ttl_s=self.quotas.run_slot_ttl_s,
        )
        if refusal is not None:
            _counted("run", refusal)
            raise QuotaExceededError(
                f"run refused: {refusal.message}",
                quota=refusal.as_dict(),
                retry_after_s=refusal.retry_after_s,
            )

    def steps(self, binding: RunBinding, code_digest: str) -> dict[str, Callable[[], None]]:
        """The ``begin`` and ``end`` of a :class:`RunScope` that take and free the run's quotas.

        A checking run (read-only: a ``verify`` program, run inside the run it checks) and a
        compensation (undoing a call) are parts of a run that was counted: they are not runs of
        their own here, or ``concurrent_runs = 1`` would refuse every ``run --verify``."""
        if binding.read_only or binding.compensates is not None:
            return {}
        return {"begin": partial(self.begin_run, binding, code_digest), "end": partial(self.end_run, binding)}

    def end_run(self, binding: RunBinding) -> None:
        if self.holds_slot(binding):
            self.book.release_run(binding.run_id)


class QuotaGate:
    name = "quota"

    def __init__(self, quotas: QuotaPolicy, book: QuotaBook, lane: anyio.CapacityLimiter) -> None:
        self.quotas = quotas
        self.book = book
        self._lane = lane
        """The broker's ledger lane: quota counts queue with its other ledger writes."""

    async def _ledger(self, work: Callable[[], _T]) -> _T:
        return await anyio.to_thread.run_sync(work, limiter=self._lane)

    async def check(self, call: Call, facts: Facts) -> Decision:
        refusal = await self._take(call, facts, peek=True)
        return Deny(self.name, refusal) if refusal else Allow(facts)

    async def commit(self, call: Call, facts: Facts) -> Deny | None:
        """Count the call (and its price), unless another call used the quota up meanwhile."""
        refusal = await self._take(call, facts, peek=False)
        return Deny(self.name, refusal) if refusal else None

    async def _take(self, call: Call, facts: Facts, *, peek: bool) -> str | None:
        if call.kind != "tool" or call.binding.compensates is not None:
            return None  # resources and prompts are not tool calls; undoing is never held back
        windows = _windows(self.quotas, call.binding, ("tool_calls", "money"))
        # A counted call is the run's sign of life: its concurrent-run slot lives on from now.
        holds_slot = _slots(self.quotas, call.binding) and not call.binding.read_only
        slot_ttl_s = self.quotas.run_slot_ttl_s if holds_slot else None
        if not windows and (peek or slot_ttl_s is None):
            return None
        take = partial(
            self.book.take_call, call.binding, windows, money=facts.cost, slot_ttl_s=slot_ttl_s, peek=peek
        )
        refusal = await self._ledger(take)
        if refusal is None:
            return None
        _counted("tool_call", refusal)  # a call is denied once: by the check or by the commit
        return f"tool call refused: {refusal.message}"
