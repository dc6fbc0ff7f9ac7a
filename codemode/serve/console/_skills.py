"""Saved skills in the console: each tenant's skills, one skill whole, and its answers (blocking:
call from a thread).

Skills are judged against every approved tool (the engine's approved tree), as ``codemode
skill`` judges them against codemode.lock, and moved by the very functions the CLI uses:
:meth:`codemode.skills.TenantSkills.approve` (a proposal, or a stale skill re-approved; a run's
proposal is refused to the principal that made it unless the policy's ``approve_own_skills``
says so) and :meth:`codemode.ledger.SkillBook.revoke`. The operator's principal is who approves.

An operator sees and answers only the skills of the tenants in their :class:`TenantScope`; a
skill of another tenant is answered exactly like one that is not there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from codemode._text import escape_invisible
from codemode.config import PolicyConfig
from codemode.ledger import LedgerStateError, SkillBook, SkillVersion
from codemode.serve.console._desk import DeskError
from codemode.serve.console._scope import TenantScope
from codemode.skills import SkillDiff, SkillError, SkillState, TenantSkills, approves_own_skills
from codemode.stubs import VirtualTree

SkillMark = Literal["proposed", "approved", "stale", "revoked"]


@dataclass(frozen=True)
class SkillRow:
    """One version of a skill as the list shows it."""

    version: SkillVersion
    mark: SkillMark


def _mark(version: SkillVersion, state: SkillState | None) -> SkillMark:
    if state is not None and state.version.skill_id == version.skill_id and state.stale:
        return "stale"
    if version.status == "approved":
        return "approved"
    return "revoked" if version.status == "revoked" else "proposed"


def _tenants(book: SkillBook, scope: TenantScope) -> list[str]:
    return book.tenants() if scope.every else scope.names()


def list_skills(book: SkillBook, tree: VirtualTree, scope: TenantScope) -> dict[str, list[SkillRow]]:
    """Per tenant in ``scope`` that has skills: each skill's active version (approved or stale),
    a newer proposal of it, or, when every version is revoked, the newest revoked one."""
    found: dict[str, list[SkillRow]] = {}
    for tenant in _tenants(book, scope):
        skills = TenantSkills(book, tenant, tree)
        states = skills.states()
        versions = book.versions(tenant)
        rows: list[SkillRow] = []
        for name in sorted({v.name for v in versions}):
            mine = [v for v in versions if v.name == name]
            state = states.get(name)
            live = [v for v in mine if v.status != "revoked"]
            shown = [state.version] if state is not None else []
            if live and live[-1].status == "proposed":
                shown.append(live[-1])
            rows.extend(SkillRow(v, _mark(v, state)) for v in shown or mine[-1:])
        if rows:
            found[tenant] = rows
    return found


@dataclass(frozen=True)
class SkillPage:
    tenant: str
    name: str
    versions: list[SkillRow]
    picked: SkillVersion
    mark: SkillMark
    stale: tuple[str, ...]
    diff: SkillDiff
    base: SkillVersion | None
    """What the source is compared with: the active version, or (for it) the one before."""

    @property
    def source(self) -> str:
        return escape_invisible(self.picked.source)

    @property
    def source_diff(self) -> str:
        return escape_invisible(self.diff.source_diff)

    @property
    def changed(self) -> dict[str, str]:
        """Each dependency whose pin is not the one approved: module -> its pin now (or gone)."""
        return {module: now or "gone" for module, _, now in self.diff.changed_dependencies}

    @property
    def approvable(self) -> bool:
        return self.mark in ("proposed", "stale")


def _versions(book: SkillBook, tenant: str, name: str, scope: TenantScope) -> list[SkillVersion]:
    versions = book.versions(tenant, name) if scope.sees(tenant) else []
    if not versions:
        # Another tenant's skill gets this very answer: the page must not tell that it exists.
        raise DeskError(404, f"no skill {name!r} in tenant {tenant!r}: pick a skill from the list.")
    return versions


def _pick(versions: list[SkillVersion], version: int | None) -> SkillVersion:
    if version is None:
        live = [v for v in versions if v.status != "revoked"]
        return (live or versions)[-1]
    for found in versions:
        if found.version == version:
            return found
    have = ", ".join(str(v.version) for v in versions)
    raise DeskError(404, f"skill {versions[0].name!r} has no version {version} (it has {have}).")


def skill_page(
    book: SkillBook, tree: VirtualTree, scope: TenantScope, tenant: str, name: str, version: int | None
) -> SkillPage:
    """One skill: its versions, the picked one's source and pins, and what changed."""
    versions = _versions(book, tenant, name, scope)
    picked = _pick(versions, version)
    skills = TenantSkills(book, tenant, tree)
    state = skills.states().get(name)
    active = None if state is None else state.version
    if active is not None and active.skill_id != picked.skill_id:
        base: SkillVersion | None = active
    else:
        older = [v for v in versions if v.version < picked.version]
        base = older[-1] if older else None
    rows = [SkillRow(v, _mark(v, state)) for v in versions]
    mark = _mark(picked, state)
    stale = state.stale if state is not None and mark == "stale" else ()
    return SkillPage(tenant, name, rows, picked, mark, stale, skills.diff(picked, base), base)


def approve_skill(
    book: SkillBook,
    tree: VirtualTree,
    policy: PolicyConfig,
    scope: TenantScope,
    *,
    tenant: str,
    name: str,
    version: int,
    digest: str,
    operator: str,
) -> SkillVersion:
    """Approve the version the operator saw (``digest``: its source digest on their page)."""
    picked = _pick(_versions(book, tenant, name, scope), version)
    if picked.digest != digest:
        raise DeskError(
            409,
            f"skill {name} v{version} has source digest {picked.digest}, not {digest}: your page is out "
            "of date. Reload it and read the source again before answering.",
        )
    skills = TenantSkills(book, tenant, tree)
    try:
        return skills.approve(picked, by=operator, allow_self=approves_own_skills(policy, operator))
    except (SkillError, LedgerStateError) as exc:
        raise DeskError(409, str(exc)) from None


def revoke_skill(
    book: SkillBook, scope: TenantScope, *, tenant: str, name: str, version: int | None, operator: str
) -> list[SkillVersion]:
    """Revoke one version, or (``version`` None) every version not revoked yet."""
    _versions(book, tenant, name, scope)
    try:
        return book.revoke(tenant, name, by=operator, version=version)
    except LedgerStateError as exc:
        raise DeskError(409, str(exc)) from None
