"""The ``[batch]`` section: defaults for ``codemode batch``, and per-item limits that may only
tighten the policy's per-run budgets (an item is one run)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

BatchEngine = Literal["local", "ray"]


class BatchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(default=4, ge=1, le=256)
    """Items running at once (each in its own sandbox from the warm pool)."""
    max_attempts: int = Field(default=3, ge=1, le=100)
    """Attempts per item before it stays failed. A failure that another attempt would repeat (a
    policy denial, the program's own error before any call) takes one; unknown items are never
    retried by themselves."""
    wall_time_s: float | None = Field(default=None, gt=0)
    """Per-item wall time; at most ``[sandbox] wall_time_s``."""
    calls_per_item: int | None = Field(default=None, ge=0)
    """Per-item call cap; at most ``[policy.budget] calls_per_run``."""
    money_per_item: float | None = Field(default=None, ge=0)
    """Per-item spend cap, in the unit of ``[policy.budget] money_per_run``."""
    engine: BatchEngine = "local"
    """Where items run: ``local`` (this machine) or ``ray`` (actors on a Ray cluster; needs
    ``pip install 'codemode[ray]'`` and a ``[ledger] url`` that every node reaches)."""
    ray_address: str | None = None
    """The Ray cluster for ``engine = "ray"``: ``HOST:PORT``, or unset for the cluster this
    machine belongs to (``RAY_ADDRESS``, or the one ``ray start`` joined)."""
