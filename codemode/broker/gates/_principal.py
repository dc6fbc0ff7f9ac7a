"""Principal gate: the run is bound to a known identity, in a tenant it belongs to, not expired.

Identity and tenant come only from the host's binding of the run (``RunBinding``); nothing the
program sends (arguments, ``_meta``) can change them.
"""

from __future__ import annotations

from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker._selectors import any_match
from codemode.broker._visibility import server_reads
from codemode.broker.gates._scope import check_glob
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
    """Resources and prompts: the principal is granted this one (see
    :func:`codemode.broker._visibility.server_reads` for the rules).

    An explicit ``resources`` grant is matched against the URI with the scope rules' glob rules
    (a ``..`` segment, a backslash or a control character never matches); ``SERVER/*`` grants
    every resource of the server. Without one, a server's resources and prompts follow its tools,
    but never on a server the principal may use only within scope rules: a resource URI
    (``crm://customers/CUST-9999``) or a prompt's arguments name no tool argument, so those rules
    cannot be checked against them, and they could reach what the scoped tools may not.
    """

    name = "principal"

    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy

    async def check(self, call: Call, facts: Facts) -> Decision:
        assert facts.principal is not None, "the principal gate runs first"
        assert call.kind != "tool", "tools pass the tool gate"
        who, server = call.binding.principal, call.server
        reads = server_reads(self.policy, facts.principal, who, server, call.kind)
        if reads.refusal is not None:
            return Deny(*reads.refusal)
        if reads.selectors is None or _granted(reads.selectors, call):
            return Allow(facts)
        return Deny(
            self.name,
            f"principal {who!r} may not use {call.kind} {call.name!r} of server {server!r}: "
            f"outside its {call.kind}s grant {list(reads.selectors)}",
        )


_FILE = "file://"


def _granted(selectors: tuple[str, ...], call: Call) -> bool:
    if call.kind == "prompt":
        return any_match(selectors, call.server, call.name)
    globs = [selector.partition("/")[2] for selector in selectors if selector != "*"]
    if "*" in selectors or "*" in globs:  # every resource of the server
        return True
    uri = call.name
    # check_glob matches a scheme://host/... glob as a URL, which needs a host; a file:///path
    # URI has none, so such URIs are matched by their path against file:/// globs' paths.
    files = [glob.removeprefix(_FILE) for glob in globs if glob.startswith(_FILE + "/")]
    if uri.startswith(_FILE + "/"):
        return bool(files) and check_glob(uri.removeprefix(_FILE), files) is None
    return check_glob(uri, [glob for glob in globs if not glob.startswith(_FILE + "/")]) is None
