"""The ``[policy.quotas]`` section: how much a principal or a tenant may use over time.

Limits count runs, tool calls and money (the prices of ``[policy.budget] costs``) per fixed
minute, hour and day (UTC), and runs at the same time. ``[policy.quotas.default]`` applies to
every principal, each counted on its own; ``[policy.quotas.principals.<name>]`` replaces the
default's fields it sets for that principal; ``[policy.quotas.tenants.<name>]`` counts the whole
tenant together. Shape only here: the broker and the ledger decide what the numbers mean.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["QuotaLimits", "QuotaPolicy"]


class QuotaLimits(BaseModel):
    """Limits of one principal or tenant; each unset field is no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs_per_minute: int | None = Field(default=None, ge=0)
    runs_per_hour: int | None = Field(default=None, ge=0)
    runs_per_day: int | None = Field(default=None, ge=0)
    tool_calls_per_minute: int | None = Field(default=None, ge=0)
    tool_calls_per_hour: int | None = Field(default=None, ge=0)
    tool_calls_per_day: int | None = Field(default=None, ge=0)
    money_per_minute: float | None = Field(default=None, ge=0)
    """Money of tool calls (``[policy.budget] costs``, in their unit) per minute."""
    money_per_hour: float | None = Field(default=None, ge=0)
    money_per_day: float | None = Field(default=None, ge=0)
    concurrent_runs: int | None = Field(default=None, ge=0)
    """Runs at the same time, on every replica that shares the ledger."""

    def over(self, default: QuotaLimits) -> QuotaLimits:
        """These limits, with ``default``'s for every field this table does not set."""
        inherited = {name: getattr(default, name) for name in default.model_fields_set}
        return QuotaLimits.model_validate(
            {**inherited, **{n: getattr(self, n) for n in self.model_fields_set}}
        )

    @property
    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in type(self).model_fields)


class QuotaPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    default: QuotaLimits = Field(default_factory=QuotaLimits)
    """Every principal's limits (each principal counted on its own)."""
    principals: dict[str, QuotaLimits] = Field(default_factory=lambda: {})
    """Per principal: the fields set here replace the default's."""
    tenants: dict[str, QuotaLimits] = Field(default_factory=lambda: {})
    """Per tenant: everything its principals use, counted together."""
    run_slot_ttl_s: float = Field(default=3600.0, gt=0, le=7 * 86_400)
    """How long a concurrent-run slot is held without a sign of life from its run (its start or
    a counted call): a replica killed mid-run frees its slots after this at the latest (at once
    on its own host). Set it above the longest run you allow."""

    def for_principal(self, name: str) -> QuotaLimits:
        limits = self.principals.get(name)
        return self.default if limits is None else limits.over(self.default)

    def for_tenant(self, name: str) -> QuotaLimits:
        return self.tenants.get(name) or QuotaLimits()

    @property
    def configured(self) -> bool:
        """Whether any limit is set at all (none: the broker counts nothing)."""
        tables = [self.default, *self.principals.values(), *self.tenants.values()]
        return not all(limits.empty for limits in tables)
