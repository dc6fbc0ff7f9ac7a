"""The risk of a tool whose hints a reviewer accepted: rated by them although its server is not
trusted, never below what they claim, and re-read when the pin's acceptance changes."""

from __future__ import annotations

from typing import Any

import pytest

from codemode.broker import tool_risk
from codemode.broker._decisions import Allow
from codemode.broker.gates import ToolGate
from codemode.catalog import accept_hints, approve, revoke
from codemode.config import Risk
from tests.broker._gate_calls import Catalog, Pins, context, policy, principal_facts, spec

pytestmark = pytest.mark.anyio

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False}


@pytest.mark.parametrize(
    ("annotations", "trusted", "accepted", "risk"),
    [
        (READ_ONLY, False, None, "high"),  # an untrusted server's claim alone lowers nothing
        (READ_ONLY, False, "low", "low"),
        ({"destructiveHint": False}, False, "medium", "medium"),
        # Never below the claim, whatever the pin says (the lock's check keeps them equal).
        ({"destructiveHint": True}, False, "low", "high"),
        ({"readOnlyHint": True, "destructiveHint": True}, False, "low", "high"),
        (None, False, "low", "high"),
        ({"destructiveHint": False}, False, "low", "medium"),
        # A trusted server's hints count with or without an acceptance.
        (READ_ONLY, True, None, "low"),
        ({"destructiveHint": True}, True, None, "high"),
    ],
)
def test_tool_risk_with_accepted_hints(
    annotations: dict[str, Any] | None, trusted: bool, accepted: Risk | None, risk: Risk
) -> None:
    assert tool_risk(policy(), "crm", "t", annotations, trusted=trusted, accepted=accepted) == risk


def test_the_policy_still_declares_read_only_first() -> None:
    rules = policy(consent={"read_only": ["crm/t"]})
    assert tool_risk(rules, "crm", "t", {"destructiveHint": True}, trusted=False) == "low"


async def test_the_tool_gate_rates_by_the_pins_acceptance_and_sees_it_change_at_the_same_hash() -> None:
    tool = spec(annotations=READ_ONLY)
    pins = Pins(tool)
    gate = ToolGate(policy(), Catalog(tool), pins)

    async def risk() -> str:
        decision = await gate.check(context(tool), principal_facts())
        assert isinstance(decision, Allow)
        return decision.facts.risk

    assert await risk() == "high"
    pins.lock = accept_hints(pins.lock)[0]  # `codemode pin --accept-hints` beside a running serve
    assert await risk() == "low"
    # Revoked and approved again: the same hash, without the acceptance.
    pins.lock = approve(revoke(pins.lock, "crm", "add_note"))[0]
    assert await risk() == "high"
