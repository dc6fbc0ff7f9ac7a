"""Saved skills: programs kept as importable, reviewed modules (``skills/<name>.py``).

* :mod:`._check` — what a skill may be (``ast`` only): typed, documented functions whose
  imports are tool stubs, other skills, the ``codemode`` runtime or the standard library.
* :mod:`._pin` — a skill's pin (its source and every dependency's pin) and staleness.
* :mod:`._transfer` — skills as export files, with a digest checked on import.
* :mod:`._tenant` — a tenant's skills against this deployment's tools; the one way to save one.
* :mod:`._offer` — which skills a principal's run in a tenant is offered (``skills/`` of its tree).

Versions and their approvals are stored in the ledger (:class:`codemode.ledger.SkillBook`).
"""

from codemode.skills._check import Known, SkillError, SkillFunction, SkillShape, check_name, check_skill
from codemode.skills._offer import may_use, offered_skills
from codemode.skills._pin import skill_pin, source_digest, stale_reasons
from codemode.skills._tenant import (
    SkillDiff,
    SkillState,
    StaleProposalError,
    TenantSkills,
    approves_own_skills,
    tool_pins,
)
from codemode.skills._transfer import SkillExport, export_text, read_export

__all__ = [
    "Known",
    "SkillDiff",
    "SkillError",
    "SkillExport",
    "SkillFunction",
    "SkillShape",
    "SkillState",
    "StaleProposalError",
    "TenantSkills",
    "approves_own_skills",
    "check_name",
    "check_skill",
    "export_text",
    "may_use",
    "offered_skills",
    "read_export",
    "skill_pin",
    "source_digest",
    "stale_reasons",
    "tool_pins",
]
