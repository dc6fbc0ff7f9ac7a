"""Saved skills in runs: ``skills/`` in a run's tree, and ``codemode.propose_skill`` from one.

Which skills a run is offered is :func:`codemode.skills.offered_skills`'s decision. A program's
proposal is checked like ``codemode skill add`` (against the tools its principal can see, so a
proposal cannot probe for hidden tools) and stored as *proposed*: no run can import it until a
person approves it, and nothing a program can call approves anything.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from codemode.calls import (
    CallDenied,
    CallHandler,
    CallOutcome,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    SkillProposal,
    SkillProposer,
    ToolCallRequest,
    ToolError,
    ToolResult,
)
from codemode.config import PolicyConfig
from codemode.ledger import Ledger, LedgerStateError, SkillVersion, StoreLedger
from codemode.skills import SkillError, TenantSkills, offered_skills
from codemode.stubs import VirtualTree

MAX_PROPOSALS_PER_RUN = 10
"""Each proposal is checked and read against the ledger: a run gets a few tries, not a loop's worth."""


async def skill_view(
    view: VirtualTree,
    approved: VirtualTree,
    ledger: Ledger | None,
    policy: PolicyConfig,
    principal: str,
    tenant: str,
) -> VirtualTree:
    """``view`` (the principal's tree) with ``skills/``; ``approved`` is the whole tree of
    approved tools, against which skills' pins are checked. A ledger that keeps no skills (a
    test's own) adds none. The ledger is read in a worker thread, as every ledger read here is."""
    if not isinstance(ledger, StoreLedger):
        return view
    book = ledger.skills
    modules = await anyio.to_thread.run_sync(offered_skills, book, approved, view, policy, principal, tenant)
    return view.with_skills(modules) if modules else view


class ProposingHandler(CallHandler, SkillProposer):
    """A run's call handler that also takes its skill proposals (the calls go to ``calls``)."""

    def __init__(self, calls: CallHandler, ledger: Ledger | None, view: Callable[[str], VirtualTree]) -> None:
        self._calls = calls
        self._ledger = ledger
        self._view = view
        """The tree a principal sees (its tools, approved now)."""
        self._proposals = 0

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        return await self._calls.call_tool(binding, request)

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        return await self._calls.read_resource(binding, request)

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        return await self._calls.get_prompt(binding, request)

    async def propose_skill(self, binding: RunBinding, proposal: SkillProposal) -> CallOutcome:
        ledger = self._ledger
        if binding.read_only:
            return CallDenied(gate="skills", reason="a read-only run proposes no skill")
        if not isinstance(ledger, StoreLedger):
            return CallDenied(gate="skills", reason="this deployment's ledger keeps no skills")
        self._proposals += 1
        if self._proposals > MAX_PROPOSALS_PER_RUN:
            return CallDenied(gate="skills", reason=f"a run proposes at most {MAX_PROPOSALS_PER_RUN} skills")
        view = self._view(binding.principal)

        def save() -> SkillVersion:
            skills = TenantSkills(ledger.skills, binding.tenant, view)
            return skills.save(
                proposal.name,
                proposal.source,
                proposal.description,
                by=binding.principal,
                run_id=binding.run_id,
            )

        try:
            saved = await anyio.to_thread.run_sync(save)
        except (SkillError, LedgerStateError) as exc:
            return ToolError(message=str(exc))
        return ToolResult(
            structured={
                "name": saved.name,
                "version": saved.version,
                "status": saved.status,
                "note": "proposed only: a person reviews it (codemode skill review) and approves it "
                "before any run can import it",
            }
        )
