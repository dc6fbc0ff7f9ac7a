"""Which tenants an operator sees in the console (``[serve.tokens.<name>] console_tenants``).

Every read and every answer of the console goes through a :class:`TenantScope`: runs, their
calls and evidence, the filter's pickers, the pending approvals, plans and skills of other
tenants are not shown, and a run, ticket, plan or skill of another tenant is answered exactly
like one that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TenantScope:
    tenants: frozenset[str] | None
    """The tenants seen; None: every tenant (``console_tenants = ["*"]``)."""

    @property
    def every(self) -> bool:
        return self.tenants is None

    def sees(self, tenant: str) -> bool:
        return self.tenants is None or tenant in self.tenants

    def names(self) -> list[str]:
        """The tenants seen, sorted (empty for every tenant: ask :attr:`every` first)."""
        return sorted(self.tenants or ())

    def label(self) -> str:
        return "every tenant" if self.tenants is None else ", ".join(self.names()) or "no tenant"


ALL_TENANTS = TenantScope(None)
