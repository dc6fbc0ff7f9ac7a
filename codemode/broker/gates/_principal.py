"""Principal gate: the run is bound to a known identity, in a tenant it belongs to, not expired.

Identity and tenant come only from the host's binding of the run (``RunBinding``); nothing the
program sends (arguments, ``_meta``) can change them.
"""

from __future__ import annotations

from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker._selectors import server_granted
from codemode.config import PolicyConfig


class PrincipalGate:
    name = "principal"

    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy

    async def check(self, call: Call, facts: Facts) -> Decision:
        binding = call.binding
        if not binding.principal or not binding.tenant:
            return Deny(self.name, "the run has no principal or tenant bound to it")
        if binding.expires_at is not None and call.now > binding.expires_at:
            return Deny(self.name, "the run's context has expired; start a new run")
        principal = self.policy.principal(binding.principal)
        if principal is None:
            return Deny(self.name, f"unknown principal {binding.principal!r} (the policy denies by default)")
        if binding.tenant not in principal.tenants:
            return Deny(
                self.name,
                f"principal {binding.principal!r} does not belong to tenant {binding.tenant!r} "
                "(cross-tenant access)",
            )
        return Allow(facts.with_(principal=principal))


class ServerGate:
    """Resources and prompts: the principal may use some tool of the server (a server grant)."""

    name = "principal"

    async def check(self, call: Call, facts: Facts) -> Decision:
        assert facts.principal is not None, "the principal gate runs first"
        if not server_granted(facts.principal.tools, call.server):
            return Deny(self.name, f"principal {call.binding.principal!r} may not use server {call.server!r}")
        return Allow(facts)
