"""Quotas counted in the ledger's database, so every replica sharing it counts the same.

Counts are kept per fixed window (the UTC minute, hour or day a moment falls in): a counter row
holds its window's start and what was used in it; a counter whose window has passed counts as
zero and is overwritten by the next use. Concurrent runs hold a *slot* each, a row with an owner
and an expiry: the run's end removes it; a run's counted calls push its expiry on; a slot whose
owner is gone (on this host) or whose expiry has passed no longer counts, so a replica killed
with SIGKILL does not hold slots for ever.

Every check-and-count is one write transaction, which the store makes exclusive across every
client (``BEGIN IMMEDIATE``, PostgreSQL's writers' lock): two replicas cannot both take the last
unit. A refused run is recorded as a run of status ``refused`` (started and finished in that same
transaction, with the quota in its summary); a refused call is recorded by the broker as a denial
of the ``quota`` gate. The counters are not events: they are not in the hash chain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from codemode.calls import RunBinding
from codemode.ledger._context import LedgerContext
from codemode.ledger._events import emit
from codemode.ledger._owner import owner_alive
from codemode.ledger._runs import started_fields
from codemode.ledger._stored import stored_summary
from codemode.ledger._time import later, to_text
from codemode.ledger.stores import StoreTransaction

Holder = Literal["principal", "tenant"]
Measure = Literal["runs", "tool_calls", "money"]
Window = Literal["minute", "hour", "day"]
WINDOW_S: dict[Window, int] = {"minute": 60, "hour": 3600, "day": 86_400}

MONEY_UNIT = 1_000_000
"""Money is counted in millionths (the store keeps integers only)."""
SLOT_RETRY_S = 1.0
"""When to try again after the concurrent-runs limit: a slot frees when any run ends, unknown when."""


@dataclass(frozen=True)
class WindowLimit:
    """At most ``limit`` of ``measure`` per ``window`` for one principal or tenant."""

    holder: Holder
    name: str
    measure: Measure
    window: Window
    limit: int
    """In units of ``measure`` (money: millionths, see :data:`MONEY_UNIT`)."""

    @property
    def key(self) -> str:
        return f"{self.holder}\x1f{self.name}\x1f{self.measure}\x1f{self.window}"


@dataclass(frozen=True)
class SlotLimit:
    """At most ``limit`` runs at the same time for one principal or tenant."""

    holder: Holder
    name: str
    limit: int


@dataclass(frozen=True)
class QuotaRefusal:
    """Which quota refused, its limit, what was used, and when to retry."""

    holder: Holder
    name: str
    quota: str
    """``runs_per_minute``, ``tool_calls_per_day``, ``money_per_hour``, ``concurrent_runs``..."""
    limit: float
    used: float
    retry_after_s: float
    retry_at: str
    """The moment to retry, as the ledger writes times (UTC)."""

    @property
    def message(self) -> str:
        return (
            f"quota exceeded: {self.holder} {self.name!r} has used {self.used:g} of its "
            f"{self.quota} = {self.limit:g}; retry after {math.ceil(self.retry_after_s)} s "
            f"(at {self.retry_at}), or raise the limit in [policy.quotas]"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def window_start(now: datetime, window: Window) -> datetime:
    """The start of the fixed window (UTC) that ``now`` falls in."""
    size = WINDOW_S[window]
    seconds = int(now.timestamp()) // size * size
    return datetime.fromtimestamp(seconds, tz=UTC)


def _window_refusal(
    tx: StoreTransaction, limits: Sequence[WindowLimit], amount: dict[Measure, int], now: datetime
) -> tuple[QuotaRefusal | None, dict[str, tuple[str, int]]]:
    """The first limit that ``amount`` would pass, and every counter as it is to be written."""
    counted = [limit for limit in limits if amount.get(limit.measure, 0) > 0]
    stored = tx.quota_usage([limit.key for limit in counted])
    updates: dict[str, tuple[str, int]] = {}
    for limit in counted:
        start = window_start(now, limit.window)
        start_text = to_text(start)
        since, used = stored.get(limit.key, (start_text, 0))
        used = used if since == start_text else 0  # a counter of a past window counts as zero
        wanted = amount[limit.measure]
        if used + wanted > limit.limit:
            ends = start + timedelta(seconds=WINDOW_S[limit.window])
            scale = MONEY_UNIT if limit.measure == "money" else 1
            refusal = QuotaRefusal(
                holder=limit.holder,
                name=limit.name,
                quota=f"{limit.measure}_per_{limit.window}",
                limit=limit.limit / scale,
                used=used / scale,
                retry_after_s=max((ends - now).total_seconds(), 0.0),
                retry_at=to_text(ends),
            )
            return refusal, {}
        updates[limit.key] = (start_text, used + wanted)
    return None, updates


def _slot_refusal(
    ctx: LedgerContext, tx: StoreTransaction, binding: RunBinding, slots: Sequence[SlotLimit], now: datetime
) -> QuotaRefusal | None:
    if not slots:
        return None
    stamp = to_text(now)
    live = [
        row
        for row in tx.quota_slots(binding.principal, binding.tenant)
        if str(row["expires_at"]) > stamp
        and (row["owner"] == ctx.owner or owner_alive(cast("str | None", row["owner"])) is not False)
    ]
    for slot in slots:
        held = sum(1 for row in live if row[slot.holder] == slot.name)
        if held >= slot.limit:
            return QuotaRefusal(
                holder=slot.holder,
                name=slot.name,
                quota="concurrent_runs",
                limit=slot.limit,
                used=held,
                retry_after_s=SLOT_RETRY_S,
                retry_at=later(now, SLOT_RETRY_S),
            )
    return None


class QuotaBook:
    """The quota operations of one ledger (see the module docstring)."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def begin_run(
        self,
        binding: RunBinding,
        code_digest: str,
        *,
        windows: Sequence[WindowLimit],
        slots: Sequence[SlotLimit],
        slot_ttl_s: float,
    ) -> QuotaRefusal | None:
        """Count the run and record its start, or record its refusal; in one transaction."""
        ctx = self._ctx
        with ctx.write() as tx:
            now = ctx.now()
            refusal, updates = _window_refusal(tx, windows, {"runs": 1}, now)
            refusal = refusal or _slot_refusal(ctx, tx, binding, slots, now)
            fields = started_fields(ctx, binding, code_digest, now)
            row = emit(ctx, tx, "run_started", binding.run_id, fields)
            if refusal is not None:
                summary = stored_summary({"refused": {"gate": "quota", **refusal.as_dict()}})
                ended = {"status": "refused", "summary_json": summary, "finished_at": to_text(now)}
                emit(ctx, tx, "run_finished", binding.run_id, ended, current=row)
                return refusal
            for key, (start, used) in updates.items():
                tx.set_quota_usage(key, start, used)
            if slots:
                tx.hold_quota_slot(self._slot(binding, later(now, slot_ttl_s)))
        return None

    def take_call(
        self,
        binding: RunBinding,
        windows: Sequence[WindowLimit],
        *,
        money: float,
        slot_ttl_s: float | None = None,
        peek: bool = False,
    ) -> QuotaRefusal | None:
        """Count one tool call (and its price) unless a limit refuses it; ``peek`` only checks.
        With ``slot_ttl_s`` the run's slot (if it holds one) lives that much longer from now."""
        ctx = self._ctx
        amount: dict[Measure, int] = {"tool_calls": 1, "money": round(money * MONEY_UNIT)}
        with ctx.write() if not peek else ctx.read() as tx:
            now = ctx.now()
            refusal, updates = _window_refusal(tx, windows, amount, now)
            if refusal is not None or peek:
                return refusal
            for key, (start, used) in updates.items():
                tx.set_quota_usage(key, start, used)
            # Only a slot the run holds lives on: a call never makes one (a read-only check run
            # takes none) nor brings back one that expired without the limit being checked.
            stamp = to_text(now)
            held = slot_ttl_s is not None and any(
                str(slot["run_id"]) == binding.run_id and str(slot["expires_at"]) > stamp
                for slot in tx.quota_slots(binding.principal, binding.tenant)
            )
            if held and slot_ttl_s is not None:
                tx.hold_quota_slot(self._slot(binding, later(now, slot_ttl_s)))
        return None

    def release_run(self, run_id: str) -> None:
        """The run has ended (however): its concurrent-run slot is free."""
        with self._ctx.write() as tx:
            tx.drop_quota_slots([run_id])

    def _slot(self, binding: RunBinding, expires_at: str) -> dict[str, str]:
        return {
            "run_id": binding.run_id,
            "principal": binding.principal,
            "tenant": binding.tenant,
            "owner": self._ctx.owner,
            "expires_at": expires_at,
        }
