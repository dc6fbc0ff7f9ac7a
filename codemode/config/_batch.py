"""The ``[batch]`` section: defaults for ``codemode batch``, and per-item limits that may only
tighten the policy's per-run budgets (an item is one run)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class BatchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(default=4, ge=1, le=256)
    """Items running at once (each in its own sandbox from the warm pool)."""
    max_attempts: int = Field(default=3, ge=1, le=100)
    """Attempts per item before it stays failed (unknown items are never retried by themselves)."""
    wall_time_s: float | None = Field(default=None, gt=0)
    """Per-item wall time; at most ``[sandbox] wall_time_s``."""
    calls_per_item: int | None = Field(default=None, ge=0)
    """Per-item call cap; at most ``[policy.budget] calls_per_run``."""
    money_per_item: float | None = Field(default=None, ge=0)
    """Per-item spend cap, in the unit of ``[policy.budget] money_per_run``."""
