"""A run's skill proposals, offered for approval to the person at the MCP client.

A program's ``codemode.propose_skill(...)`` stores a *proposed* version, nothing more (see
``codemode.engine``'s ``ProposingHandler``). The person at the client is the principal that
proposed it, and a principal approves its own proposal only where the policy says so
(``[policy.principals.<name>] approve_own_skills = true``). So, once the run is over:

* the policy allows it: the client's user is asked, one proposal at a time, with the skill's
  name, description, source, and its pin (the digests of its source and of every tool and skill
  it imports). An accepted ``approve: true`` approves it through the same function as
  ``codemode skill approve`` (:meth:`codemode.skills.TenantSkills.approve`), recorded in
  the ledger as approved by that principal, with a note naming the client that answered;
* the policy forbids it: nobody is asked, and the result says the proposal waits for another
  person (``codemode skill approve NAME``).

What is offered comes from the ledger (the versions this run proposed), never from the program's
output, so nothing a program passes (an "approve this skill" in a description, a tool result) can
approve anything: only the person's answer does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import anyio
import mcp_types

from codemode._text import escape_invisible
from codemode.engine import CodeMode, RunResult
from codemode.ledger import LedgerStateError, SkillVersion, StoreLedger
from codemode.serve._consent import Asker, ask_approval, yes_no_schema
from codemode.skills import SkillError, TenantSkills, approves_own_skills

SKILL_QUESTION = "Approve this skill, so that later runs can import it?"


@dataclass(frozen=True)
class SkillOffer:
    """What became of one proposal of the run, for the ``run_code`` result."""

    name: str
    version: int
    status: Literal["approved", "proposed"]
    note: str

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "version": self.version, "status": self.status, "note": self.note}

    def text(self) -> str:
        return f"codemode: skill {self.name} v{self.version} is {self.status}: {self.note}"


def skill_approval_params(version: SkillVersion) -> mcp_types.ElicitRequestFormParams:
    imports = "\n".join(f"  {module} (pin {pin})" for module, pin in sorted(version.deps.items()))
    message = (
        f"codemode asks for approval of a skill your run proposed: {version.name} v{version.version} "
        f"(tenant {version.tenant}).\n"
        f"Description: {escape_invisible(version.description) or '(none)'}\n"
        f"Pin: {version.pin} (source {version.digest})\n"
        f"Imports:\n{imports or '  nothing but the standard library'}\n"
        f"--- source ---\n{escape_invisible(version.source.rstrip())}\n--- end of source ---\n"
        f"Approved, every later run of this tenant that may use skills can import it "
        f"(from skills.{version.name} import ...); its calls still pass every gate as the caller's."
    )
    return mcp_types.ElicitRequestFormParams(
        message=message,
        requested_schema=yes_no_schema(SKILL_QUESTION),  # type: ignore[arg-type]
    )


def _later(name: str, tenant: str) -> str:
    return f"a person approves it with `codemode skill approve {name} --tenant {tenant}` or in the console"


async def offer_proposals(engine: CodeMode, asker: Asker, result: RunResult) -> list[SkillOffer]:
    """Offer the skills ``result``'s run proposed for approval (see the module's text)."""
    ledger = engine.ledger
    if not isinstance(ledger, StoreLedger) or result.run_id == "-":
        return []
    book, tenant, principal = ledger.skills, result.tenant, result.principal
    versions = await anyio.to_thread.run_sync(book.versions, tenant)
    proposed = [v for v in versions if v.proposed_in_run == result.run_id and v.status == "proposed"]
    if not proposed:
        return []
    if not approves_own_skills(engine.config.policy, principal):
        return [
            SkillOffer(
                v.name,
                v.version,
                "proposed",
                f"it waits for another person: the policy does not let {principal} approve a skill "
                f"it proposed; {_later(v.name, tenant)} (or another principal does)",
            )
            for v in proposed
        ]
    skills = TenantSkills(book, tenant, engine.tree_for(principal))
    ttl_s = engine.config.policy.consent.approval_ttl_s
    return [await _offer(skills, asker, principal, version, ttl_s) for version in proposed]


async def _offer(
    skills: TenantSkills, asker: Asker, principal: str, version: SkillVersion, ttl_s: float
) -> SkillOffer:
    name, number = version.name, version.version
    answer = await ask_approval(asker, skill_approval_params(version), ttl_s)
    if not answer.approved:
        why = "this MCP client cannot be asked" if answer.unreachable else f"not approved: {answer.reason}"
        return SkillOffer(name, number, "proposed", f"{why}; {_later(name, skills.tenant)}")
    note = f"approved through the MCP client's elicitation by {answer.approver}"

    def approve() -> SkillVersion:
        return skills.approve(version, by=principal, allow_self=True, note=note)

    try:
        await anyio.to_thread.run_sync(approve)
    except (SkillError, LedgerStateError) as exc:
        return SkillOffer(name, number, "proposed", f"it could not be approved ({exc})")
    return SkillOffer(name, number, "approved", f"later runs import it with `from skills.{name} import ...`")
