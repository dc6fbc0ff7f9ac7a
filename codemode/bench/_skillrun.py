"""A skills task's ``skills`` mode around its jobs: the bench reviews the skill its first job
proposed (approving it, as the person reviewing it would: the approval is a ledger event like any
other), and withdraws that version when the mode is done, so the next trial proposes it afresh
and a later run's tree is as it was.

Only the version this mode's run proposed is approved or revoked: a skill of that name that the
tenant had already is refused up front, never touched."""

from __future__ import annotations

from codemode.bench._tasks import TaskError
from codemode.engine import CodeMode
from codemode.ledger import SkillBook, SkillVersion, StoreLedger
from codemode.skills import SkillError, TenantSkills

REVIEWER = "bench"
"""Who approves the proposal in the ledger (the run's principal proposed it: another one approves)."""


class SkillTaskError(TaskError):
    """A skills task cannot run against this engine's ledger as it is."""


def _book(engine: CodeMode, ledger: object) -> tuple[SkillBook, str]:
    if not isinstance(ledger, StoreLedger):
        raise SkillTaskError("a skills task needs a ledger that keeps skills (SQLite or PostgreSQL)")
    _, tenant = engine.config.policy.identity(None, None)
    return ledger.skills, tenant


def require_free(engine: CodeMode, ledger: object, skill: str, task: str) -> None:
    """Refuse to start when the tenant has a live skill of that name: the task's proposal would
    be refused, and revoking at the end would withdraw someone's skill."""
    book, tenant = _book(engine, ledger)
    live = [v for v in book.versions(tenant, skill) if v.status != "revoked"]
    if live:
        raise SkillTaskError(
            f"task {task} saves skill {skill!r}, and tenant {tenant!r} has one of that name "
            f"(v{live[-1].version}, {live[-1].status}): revoke it (codemode skill revoke {skill}) or "
            "run the bench against a config whose ledger does not have it"
        )


def approve_proposal(engine: CodeMode, ledger: object, skill: str) -> SkillVersion | None:
    """Approve the version of ``skill`` the first job's run proposed (:func:`require_free` saw to
    it that no other is live); None when it proposed none (the agent did not, or its proposal was
    refused): the variations then find no skill, and fail as they would."""
    book, tenant = _book(engine, ledger)
    proposed = [
        v for v in book.versions(tenant, skill) if v.status == "proposed" and v.proposed_in_run is not None
    ]
    if not proposed:
        return None
    # The same approval a person gives (`codemode skill approve`): refused when its imports changed.
    skills = TenantSkills(book, tenant, engine.approved_tree())
    note = "codemode bench reviews its skills task's proposal, as a person would"
    try:
        return skills.approve(proposed[-1], by=REVIEWER, allow_self=False, note=note)
    except SkillError:  # e.g. its tools changed since it was proposed: not approved, as for a person
        return None


def withdraw(engine: CodeMode, ledger: object, skill: str) -> None:
    """Revoke every live version of ``skill`` (its ledger history stays): :func:`require_free`
    saw to it that none was live before this mode, so each is this mode's, approved or left
    proposed by a job that failed, and the next trial starts as this one did."""
    book, tenant = _book(engine, ledger)
    for version in book.versions(tenant, skill):
        if version.status != "revoked":
            book.revoke(
                tenant,
                skill,
                by=REVIEWER,
                version=version.version,
                note="codemode bench: the skills task is done; its next trial proposes it again",
            )
