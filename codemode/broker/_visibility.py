"""Who may see and use what: the policy's grants, shared by the gates and the stub tree.

Kept apart from the gates so that reading it (``codemode tree``, ``codemode search``) costs no
import of the argument validator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from codemode.broker._selectors import any_match, names_server, server_denied, server_granted
from codemode.catalog import ToolSpec
from codemode.config import PolicyConfig, PrincipalPolicy

ReadKind = Literal["resource", "prompt"]


def may_use(policy: PolicyConfig, principal_name: str, server: str, tool: str) -> bool:
    """Whether the policy lets a principal see and call a tool (used for the stub tree too)."""
    principal = policy.principal(principal_name)
    if principal is None:
        return False
    return any_match(principal.tools, server, tool) and not any_match(principal.deny_tools, server, tool)


def may_see_server(policy: PolicyConfig, principal_name: str, server: str) -> bool:
    """Whether a principal may know that ``server`` exists: some grant of its reaches a tool of
    the server and no deny takes them all. For a server without a catalog to check tools against
    (it is down): saying why its import failed must not tell another principal it is there."""
    principal = policy.principal(principal_name)
    if principal is None:
        return False
    return server_granted(principal.tools, server) and not server_denied(principal.deny_tools, server)


def visible_to(policy: PolicyConfig, principal: str) -> Callable[[ToolSpec], bool]:
    """The stub-tree filter for a principal: only tools it may use are rendered to it."""

    def visible(spec: ToolSpec) -> bool:
        return may_use(policy, principal, spec.server, spec.name)

    return visible


@dataclass(frozen=True)
class ServerReads:
    """What a principal may read of one server's resources (or prompts).

    ``refusal``: ``(gate, reason)`` when it may read none; else ``selectors`` are its explicit
    ``resources``/``prompts`` grants that name the server (each read must match one), or None
    when its tools carry every one of them.
    """

    refusal: tuple[str, str] | None = None
    selectors: tuple[str, ...] | None = None


def _grants_all_tools(selectors: list[str], server: str) -> bool:
    """Whether a selector grants every tool of ``server`` (``*``, ``crm/*``, ``cr?/*``): the
    test :func:`server_denied` makes of a deny list, made of a grant list."""
    return server_denied(selectors, server)


def server_reads(
    policy: PolicyConfig, principal: PrincipalPolicy, who: str, server: str, kind: ReadKind
) -> ServerReads:
    """The principal's grant on ``server``'s resources or prompts (see :class:`PrincipalPolicy`)."""
    key = f"{kind}s"
    if server_denied(principal.deny_tools, server):
        return ServerReads(("principal", f"principal {who!r} may not use server {server!r}"))
    explicit = principal.resources if kind == "resource" else principal.prompts
    if explicit is not None:
        named = tuple(s for s in explicit if names_server(s, server))
        if named:
            return ServerReads(selectors=named)
        return ServerReads(
            (
                "principal",
                f"principal {who!r} may not use the {kind}s of server {server!r}: no selector of its "
                f"{key} grant names that server (add e.g. {server + '/*'!r} to its {key})",
            )
        )
    if not server_granted(principal.tools, server):
        return ServerReads(("principal", f"principal {who!r} may not use server {server!r}"))
    # A grant of some tools is no grant of the data behind the others: in deny mode, where only
    # what is listed is granted, a partial tool grant carries no resource and no prompt.
    if policy.mode == "deny" and not _grants_all_tools(principal.tools, server):
        return ServerReads(
            (
                "principal",
                f"principal {who!r} is granted only some tools of server {server!r}, which carry none "
                f"of its {kind}s in deny mode: grant them with {key} = [{server + '/...'!r}]",
            )
        )
    if any(server_granted(rule.tools, server) for rule in principal.scopes):
        return ServerReads(
            (
                "resource",  # the scope gate's name: the same rules refuse it
                f"principal {who!r} may use server {server!r} only within scope rules, which its "
                f"{kind}s cannot be checked against; call its tools instead, or grant them by name "
                f"with {key} = [...]",
            )
        )
    return ServerReads()


def reads_visible_to(policy: PolicyConfig, principal_name: str) -> Callable[[str, ReadKind], bool]:
    """The stub-tree filter for a server's ``_resources.py`` and ``_prompts.py``: shown only to
    a principal that may read some of them."""

    def visible(server: str, kind: ReadKind) -> bool:
        principal = policy.principal(principal_name)
        if principal is None:
            return False
        return server_reads(policy, principal, principal_name, server, kind).refusal is None

    return visible
