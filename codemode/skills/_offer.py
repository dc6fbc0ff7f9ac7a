"""Which skills a run is offered: the approved, current skills of its tenant that its principal
may use, as files for ``skills/`` in its tree.

A skill is offered only when all hold: the principal belongs to the tenant, the principal's
``skills`` rule (if set) names it, its newest version is approved, and nothing it imports changed
since (its pin holds against the tools approved now). What a skill then calls is gated as the
run's own call: the tree decides only what can be imported, never what may be called.
"""

from __future__ import annotations

import fnmatch

from codemode.config import PolicyConfig
from codemode.ledger import SkillBook
from codemode.skills._tenant import TenantSkills
from codemode.stubs import SkillModule, VirtualTree


def may_use(policy: PolicyConfig, principal: str, tenant: str, name: str) -> bool:
    """Whether ``principal`` may use the skill ``name`` of ``tenant`` (if it is current)."""
    rules = policy.principal(principal)
    if rules is None or tenant not in rules.tenants:
        return False
    return rules.skills is None or any(fnmatch.fnmatchcase(name, pattern) for pattern in rules.skills)


def offered_skills(
    book: SkillBook,
    approved: VirtualTree,
    view: VirtualTree,
    policy: PolicyConfig,
    principal: str,
    tenant: str,
) -> list[SkillModule]:
    """The skills for ``principal``'s run in ``tenant``. ``approved``: the tree of every approved
    tool, against which the skills' pins are checked; ``view``: the principal's own tree. A skill
    that imports a tool the principal cannot see is not offered either: it could not run, and its
    source would name a tool that is hidden from the principal."""
    rules = policy.principal(principal)
    if rules is None or tenant not in rules.tenants:
        return []  # another tenant's skills are not even read
    usable = {
        name: version
        for name, version in TenantSkills(book, tenant, approved).usable().items()
        if may_use(policy, principal, tenant, name)
        and all(view.tool_for_module(m) is not None for m in version.deps if m.startswith("servers."))
    }
    # A skill that imports a skill not offered is not offered: repeat until nothing drops out.
    while dropped := [
        name
        for name, version in usable.items()
        if any(m.removeprefix("skills.") not in usable for m in version.deps if m.startswith("skills."))
    ]:
        for name in dropped:
            del usable[name]
    return [SkillModule(name, v.version, v.source, v.description) for name, v in usable.items()]
