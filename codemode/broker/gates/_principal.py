"""Principal gate: the run is bound to a known identity, in a tenant it belongs to, not expired.

Identity and tenant come only from the host's binding of the run (``RunBinding``); nothing the
program sends (arguments, ``_meta``) can change them.
"""

from __future__ import annotations

from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker._selectors import server_denied, server_granted
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
    """Resources and prompts: the principal may use some tool of the server (a server grant),
    is not denied all of its tools, and is not limited by scope rules on it.

    A resource URI or a prompt's arguments name no tool argument, so scope rules cannot be
    checked against them: on a server the principal may only use within scopes, a resource
    (``crm://customers/CUST-9999``) or a prompt could reach what the scoped tools may not.
    So they are refused there, failing closed.
    """

    name = "principal"

    async def check(self, call: Call, facts: Facts) -> Decision:
        assert facts.principal is not None, "the principal gate runs first"
        principal, who, server = facts.principal, call.binding.principal, call.server
        if not server_granted(principal.tools, server) or server_denied(principal.deny_tools, server):
            return Deny(self.name, f"principal {who!r} may not use server {server!r}")
        if any(server_granted(rule.tools, server) for rule in principal.scopes):
            return Deny(
                "resource",  # the scope gate's name: the same rules refuse it
                f"principal {who!r} may use server {server!r} only within scope rules, which its "
                f"{call.kind}s cannot be checked against; call its tools instead",
            )
        return Allow(facts)
