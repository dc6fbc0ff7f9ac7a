"""Who may see and call which tool: the policy's grants, shared by the tool gate and the stub tree.

Kept apart from the gates so that reading it (``codemode tree``, ``codemode search``) costs no
import of the argument validator.
"""

from __future__ import annotations

from collections.abc import Callable

from codemode.broker._selectors import any_match
from codemode.catalog import ToolSpec
from codemode.config import PolicyConfig


def may_use(policy: PolicyConfig, principal_name: str, server: str, tool: str) -> bool:
    """Whether the policy lets a principal see and call a tool (used for the stub tree too)."""
    principal = policy.principal(principal_name)
    if principal is None:
        return False
    return any_match(principal.tools, server, tool) and not any_match(principal.deny_tools, server, tool)


def visible_to(policy: PolicyConfig, principal: str) -> Callable[[ToolSpec], bool]:
    """The stub-tree filter for a principal: only tools it may use are rendered to it."""

    def visible(spec: ToolSpec) -> bool:
        return may_use(policy, principal, spec.server, spec.name)

    return visible
