"""A tenant's skills against this deployment's tools: what is current, what is stale, and the one
way a new version is saved (checked first, then stored in the ledger).

The tools come from a stub tree rendered from the approved pins, so a tool module's pin is its
approved definition's hash and a skill that imports an unapproved tool is refused at saving.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from codemode.config import PolicyConfig
from codemode.ledger import SkillBook, SkillVersion
from codemode.skills._check import Known, SkillError, SkillShape, check_skill
from codemode.skills._pin import skill_pin, source_digest, stale_reasons
from codemode.stubs import VirtualTree


@dataclass(frozen=True, slots=True)
class SkillState:
    """A skill's active (newest approved) version and why it is stale (empty: usable)."""

    version: SkillVersion
    stale: tuple[str, ...]

    @property
    def usable(self) -> bool:
        return not self.stale


def tool_pins(tree: VirtualTree) -> dict[str, str]:
    """Tool module (``servers.crm.get_customer``) -> the hash of its approved definition."""
    pins: dict[str, str] = {}
    for spec in tree.tools():
        module = tree.module_for_tool(spec.server, spec.name)
        if module is not None:
            pins[module] = spec.schema_hash
    return pins


def _taken(tree: VirtualTree, pins: dict[str, str]) -> frozenset[str]:
    names = {spec.server for spec in tree.tools()} | {spec.name for spec in tree.tools()}
    names |= {part for module in pins for part in module.split(".")[1:]}
    return frozenset(names)


class StaleProposalError(SkillError):
    """A proposal whose imports changed since it was proposed: what was reviewed is not what would
    run, so it is not approved (a person compares them and adds it anew)."""


@dataclass(frozen=True, slots=True)
class SkillDiff:
    """What changed for one version: its dependencies whose pin is not the one it was approved
    with (module, pinned, now; now None when gone), and its source against an older version."""

    changed_dependencies: tuple[tuple[str, str, str | None], ...]
    source_diff: str


def approves_own_skills(policy: PolicyConfig, principal: str) -> bool:
    """Whether the policy lets ``principal`` approve a skill it proposed from a run
    (``[policy.principals.X] approve_own_skills``)."""
    rules = policy.principals.get(principal)
    return rules is not None and rules.approve_own_skills


class TenantSkills:
    """One tenant's skills in one ledger, judged against one stub tree."""

    def __init__(self, book: SkillBook, tenant: str, tree: VirtualTree) -> None:
        self.book = book
        self.tenant = tenant
        self.tree = tree
        self.tool_pins = tool_pins(tree)

    def states(self) -> dict[str, SkillState]:
        """Every skill with an approved version, by name."""
        active = self.book.active(self.tenant)
        reasons = stale_reasons(active, self.tool_pins)
        return {name: SkillState(v, tuple(reasons[name])) for name, v in sorted(active.items())}

    def usable(self) -> dict[str, SkillVersion]:
        return {name: s.version for name, s in self.states().items() if s.usable}

    def known(self, *, excluding: str | None = None) -> Known:
        skills = {name: v.pin for name, v in self.usable().items() if name != excluding}
        return Known(tools=self.tool_pins, skills=skills, taken=_taken(self.tree, self.tool_pins))

    def check(self, name: str, source: str) -> tuple[SkillShape, str, str]:
        """Check ``source`` as ``name``: its shape, source digest and pin as of now."""
        shape = check_skill(name, source, self.known(excluding=name))
        digest = source_digest(source)
        return shape, digest, skill_pin(digest, shape.deps)

    def save(
        self,
        name: str,
        source: str,
        description: str,
        *,
        by: str,
        run_id: str | None = None,
        approve: bool = False,
        new_version: bool = False,
        note: str | None = None,
    ) -> SkillVersion:
        """Check and store a new version. A name in use (any version not revoked) is refused
        unless ``new_version`` (a person updating it; never a run's proposal)."""
        live = [v for v in self.book.versions(self.tenant, name) if v.status != "revoked"]
        if live and not new_version:
            hint = (
                "a run cannot replace a skill: propose another name"
                if run_id is not None
                else "pass --update to add a new version"
            )
            raise SkillError(f"skill {name!r} exists in tenant {self.tenant!r} already: {hint}")
        shape, digest, pin = self.check(name, source)
        return self.book.propose(
            self.tenant,
            name,
            description=description,
            source=source,
            digest=digest,
            pin=pin,
            deps=shape.deps,
            proposed_by=by,
            proposed_in_run=run_id,
            approve=approve,
            note=note,
        )

    def approve(
        self, picked: SkillVersion, *, by: str, allow_self: bool, note: str | None = None
    ) -> SkillVersion:
        """Approve ``picked`` if it is a proposal whose imports are as they were when proposed,
        or re-approve it (as a new version) if it is the active version and stale. A run's
        proposal is refused to the principal that made it unless ``allow_self``
        (:func:`approves_own_skills`); anything else is refused with what to do."""
        name = picked.name
        _, _, pin = self.check(name, picked.source)
        if picked.status == "proposed":
            if pin != picked.pin:
                raise StaleProposalError(
                    f"skill {name} v{picked.version} imports tools or skills that changed since it was "
                    f"proposed; it is not approved. See what changed (codemode skill diff {name}), then "
                    f"save it again (codemode skill add {name} FILE --update)"
                )
            return self.book.approve(
                self.tenant, name, picked.version, by=by, allow_self=allow_self, note=note
            )
        state = self.states().get(name)
        if picked.status == "approved" and state is not None and state.stale:
            why = note or f"re-approved v{picked.version} after its dependencies changed"
            return self.save(
                name, picked.source, picked.description, by=by, approve=True, new_version=True, note=why
            )
        raise SkillError(f"skill {name} v{picked.version} is {picked.status} and current: nothing to approve")

    def diff(self, picked: SkillVersion, base: SkillVersion | None) -> SkillDiff:
        """Its dependencies' pins then and now, and its source against ``base`` (None: all new)."""
        now = dict(self.tool_pins) | {f"skills.{n}": v.pin for n, v in self.usable().items()}
        changed = tuple(
            (module, pinned, now.get(module))
            for module, pinned in picked.deps.items()
            if now.get(module) != pinned
        )
        lines = difflib.unified_diff(
            (base.source if base else "").splitlines(keepends=True),
            picked.source.splitlines(keepends=True),
            fromfile=f"skills/{picked.name}.py@{base.version}" if base else "/dev/null",
            tofile=f"skills/{picked.name}.py@{picked.version}",
        )
        return SkillDiff(changed, "".join(lines))
