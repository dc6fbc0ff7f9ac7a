"""A program's skill proposal as the engine takes it: stored as proposed (never approved), checked
against the tools its principal can see, refused in read-only runs and past a few per run, and
refused where the ledger keeps no skills; tool calls go on to the run's handler unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode.calls import (
    CallDenied,
    CallOutcome,
    PromptGetRequest,
    ResourceReadRequest,
    RunBinding,
    SkillProposal,
    ToolCallRequest,
    ToolError,
    ToolResult,
)
from codemode.engine._skills import MAX_PROPOSALS_PER_RUN, ProposingHandler
from codemode.ledger import StoreLedger, open_ledger
from codemode.stubs import render_tree
from tests.skills._deployment import SKILL, crm_tree

pytestmark = pytest.mark.anyio

ALICE = RunBinding(run_id="run_1", principal="alice", tenant="acme", trace_id="t")


class _Calls:
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def call_tool(self, binding: RunBinding, request: ToolCallRequest) -> CallOutcome:
        self.seen.append(request.tool)
        return ToolResult(structured={"ok": True})

    async def read_resource(self, binding: RunBinding, request: ResourceReadRequest) -> CallOutcome:
        return ToolResult()

    async def get_prompt(self, binding: RunBinding, request: PromptGetRequest) -> CallOutcome:
        return ToolResult()


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[StoreLedger]:
    with open_ledger(tmp_path / "codemode.db") as opened:
        yield opened


async def test_a_proposal_is_stored_proposed_and_calls_pass_through(ledger: StoreLedger) -> None:
    calls = _Calls()
    tree = crm_tree()
    handler = ProposingHandler(calls, ledger, lambda principal: tree)
    outcome = await handler.propose_skill(
        ALICE, SkillProposal(name="customers", source=SKILL, description="d")
    )
    assert isinstance(outcome, ToolResult) and outcome.structured["status"] == "proposed"
    [version] = ledger.skills.versions("acme")
    assert (version.status, version.proposed_by, version.proposed_in_run) == ("proposed", "alice", "run_1")
    assert ledger.skills.active("acme") == {}
    request = ToolCallRequest(seq=0, server="crm", tool="get_customer", schema_hash="h")
    assert await handler.call_tool(ALICE, request) == ToolResult(structured={"ok": True})
    assert calls.seen == ["get_customer"]


async def test_a_tool_the_principal_cannot_see_is_as_unknown_as_one_that_does_not_exist(
    ledger: StoreLedger,
) -> None:
    empty = render_tree([])
    handler = ProposingHandler(_Calls(), ledger, lambda principal: empty)
    outcome = await handler.propose_skill(ALICE, SkillProposal(name="customers", source=SKILL))
    assert isinstance(outcome, ToolError)
    assert "servers.crm.get_customer is not an approved tool here" in outcome.message
    assert ledger.skills.versions("acme") == []


async def test_read_only_runs_and_too_many_proposals_are_refused(ledger: StoreLedger) -> None:
    tree = crm_tree()
    handler = ProposingHandler(_Calls(), ledger, lambda principal: tree)
    read_only = ALICE.model_copy(update={"read_only": True})
    denied = await handler.propose_skill(read_only, SkillProposal(name="customers", source=SKILL))
    assert isinstance(denied, CallDenied) and "read-only" in denied.reason
    outcomes = [
        await handler.propose_skill(ALICE, SkillProposal(name=f"s{i}", source=SKILL))
        for i in range(MAX_PROPOSALS_PER_RUN + 1)
    ]
    assert all(isinstance(o, ToolResult) for o in outcomes[:-1])
    assert isinstance(outcomes[-1], CallDenied) and "at most" in outcomes[-1].reason
    assert len(ledger.skills.versions("acme")) == MAX_PROPOSALS_PER_RUN


async def test_a_ledger_without_skills_refuses_proposals() -> None:
    tree = crm_tree()
    handler = ProposingHandler(_Calls(), None, lambda principal: tree)
    denied = await handler.propose_skill(ALICE, SkillProposal(name="customers", source=SKILL))
    assert isinstance(denied, CallDenied) and denied.gate == "skills"
