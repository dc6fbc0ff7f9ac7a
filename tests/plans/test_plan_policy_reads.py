"""A dry run sends a call the policy declares read-only (``[policy.consent] read_only``, risk
``low``) even on an untrusted server whose own hints nobody accepted; without the policy's word
that call is planned, not sent. On the notes fixture server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compensation._notes import deploy_notes

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROGRAM = "from servers.notes import list_notes\nlist_notes()\n"


@pytest.mark.parametrize("declared", [True, False], ids=["read-only by policy", "no word on it"])
async def test_a_read_by_policy_is_sent_and_anything_else_is_planned(tmp_path: Path, declared: bool) -> None:
    consent = {"read_only": ["notes/list_notes"]} if declared else {}
    notes = await deploy_notes(tmp_path, trusted=False, policy={"consent": consent})
    async with notes.engine() as engine:
        plan = await engine.plan(PROGRAM)
    assert plan.result is not None and plan.result.status == "ok", plan.result
    if declared:
        assert [(r.server, r.tool) for r in plan.reads] == [("notes", "list_notes")]
        assert plan.calls == () and plan.result.result == {"notes": []}, "the read's real value"
    else:
        assert plan.reads == () and plan.result.result == "<the result of planned call #0 (notes/list_notes)>"
        assert [(c.label, c.risk) for c in plan.calls] == [("notes/list_notes", "high")]
