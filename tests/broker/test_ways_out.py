"""A call refused because nobody can approve it names the ways out that would help: accepting the
tool's hints at review, trusting the server, declaring it read-only, or the exact
``codemode approve`` line, which works as pasted and never shows a secret or a PII value."""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from codemode._redaction import forget_secrets, remember_secret
from codemode.broker._approvals import ApprovalAnswer, ApprovalRequest, CallbackApprover
from codemode.broker._decisions import Deny, NeedsApproval
from codemode.broker._facts import Call
from codemode.broker.gates import ApprovalFlow, ConsentGate, ReadOnlyRunGate, consent_digest
from codemode.calls import ToolCallRequest
from codemode.config import PolicyConfig
from tests.broker._gate_calls import SCHEMA, context, policy, principal_facts
from tests.broker.test_gates_consent import Store, Unchanged

pytestmark = pytest.mark.anyio

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False}
FIRST_LINE = "needs approval: crm/add_note is high risk (not known to be read-only)"


def pinned(annotations: dict[str, Any] | None) -> dict[str, Any]:
    return {"name": "add_note", "inputSchema": SCHEMA, "annotations": annotations}


async def refusal(
    call: Call | None = None,
    *,
    annotations: dict[str, Any] | None = READ_ONLY,
    rules: PolicyConfig | None = None,
    risk: str = "high",
    approver: CallbackApprover | None = None,
) -> str:
    rules = rules or policy()
    call = call or context()
    facts = principal_facts(rules, risk=risk, pinned=pinned(annotations))
    needs = await ConsentGate(rules, Store()).check(call, facts)
    assert isinstance(needs, NeedsApproval)
    decision = await ApprovalFlow(rules, Store(), approver, Unchanged()).obtain(call, needs)
    assert isinstance(decision, Deny)
    return decision.reason


def approve_argv(reason: str) -> list[str]:
    """The ``codemode approve`` line of a refusal, split as a POSIX shell splits it."""
    line = next(line for line in reason.splitlines() if "codemode approve" in line)
    return shlex.split(line.split("then run again: ", 1)[1])


async def test_the_first_line_is_short_and_the_ways_out_follow() -> None:
    reason = await refusal()
    lines = reason.splitlines()
    assert lines[0] == FIRST_LINE, "batch groups failures by the first line: it must not vary"
    assert lines[1].startswith("No approver is available here")
    ways = "\n".join(lines[2:])
    assert "codemode pin --accept-hints crm/add_note" in ways and "low risk" in ways
    assert "trusted = true under [servers.crm]" in ways
    assert '[policy.consent] read_only = ["crm/add_note"]' in ways
    assert approve_argv(reason) == [
        "codemode",
        "approve",
        "crm/add_note",
        "--args",
        '{"customer_id": "CUST-0001"}',
    ]


@pytest.mark.parametrize(
    ("annotations", "rules"),
    [
        (None, None),  # no hints: nothing to accept
        ({"destructiveHint": True}, None),
        ({"readOnlyHint": False}, None),
        # The hints claim medium, and medium needs approval too.
        ({"destructiveHint": False}, None),
    ],
    ids=["no-hints", "destructive", "not-read-only", "medium-at-the-default-threshold"],
)
async def test_accepting_hints_or_trusting_is_named_only_when_it_would_help(
    annotations: dict[str, Any] | None, rules: PolicyConfig | None
) -> None:
    reason = await refusal(annotations=annotations, rules=rules)
    assert "--accept-hints" not in reason and "trusted = true" not in reason
    assert "read_only" in reason and "codemode approve crm/add_note" in reason


async def test_a_medium_claim_helps_where_only_high_needs_approval() -> None:
    reason = await refusal(
        annotations={"destructiveHint": False}, rules=policy(consent={"require_at_risk": "high"})
    )
    assert "codemode pin --accept-hints crm/add_note" in reason and "medium risk" in reason


async def test_a_tool_the_policy_always_asks_for_names_only_the_one_call_approval() -> None:
    rules = policy(consent={"always": ["crm/add_note"]})
    reason = await refusal(rules=rules, risk="low")
    assert reason.splitlines()[0] == "needs approval: the policy always requires approval for crm/add_note"
    assert "--accept-hints" not in reason and "read_only" not in reason and "trusted" not in reason
    assert "codemode approve crm/add_note" in reason


HOSTILE: list[dict[str, Any]] = [
    {"customer_id": "CUST-0001", "note": 'it\'s $(touch /tmp/x) `id` "quoted" ; rm -rf ~'},
    {"customer_id": "CUST-0001", "note": "line one\nline two\ttab \x1b[31mred\x1b[0m"},
    {"customer_id": "CUST-0001", "note": "invoice.\u202etxt.exe \u200b Zoë 東京 \U000e0041"},
    {"customer_id": "CUST-0001", "note": "'", "nested": {"list": [1, 2.5, None, True]}},
]


@pytest.mark.parametrize("arguments", HOSTILE, ids=["shell", "control", "unicode", "nested"])
async def test_the_approve_line_works_as_pasted_and_shows_only_printable_ascii(
    arguments: dict[str, Any],
) -> None:
    reason = await refusal(context(arguments=arguments))
    line = next(line for line in reason.splitlines() if "codemode approve" in line)
    assert line.isascii() and line.isprintable(), line
    argv = approve_argv(reason)
    assert argv[:4] == ["codemode", "approve", "crm/add_note", "--args"] and len(argv) == 5
    assert json.loads(argv[4]) == arguments
    # The approval it issues is the one this call consumes.
    assert consent_digest(json.loads(argv[4]), pinned(READ_ONLY)) == consent_digest(
        arguments, pinned(READ_ONLY)
    )


async def test_another_principal_or_tenant_is_named_on_the_line() -> None:
    reason = await refusal(context(principal="alice", tenant="acme"))
    assert approve_argv(reason)[3:7] == ["--principal", "alice", "--tenant", "acme"]


@pytest.fixture
def known_secret() -> Iterator[str]:
    secret = "sk-live-0123456789abcdefSECRET"
    remember_secret(secret, "CRM_API_KEY")
    yield secret
    forget_secrets()


@pytest.mark.parametrize(
    "arguments",
    [
        {"customer_id": "CUST-0001", "note": "AKIAIOSFODNN7EXAMPLE"},  # shaped like an AWS key
        {"customer_id": "CUST-0001", "password": "hunter2-hunter2"},  # named as a secret
    ],
    ids=["shape", "field-name"],
)
async def test_arguments_that_look_like_a_secret_are_not_shown(arguments: dict[str, Any]) -> None:
    reason = await refusal(context(arguments=arguments))
    assert "AKIAIOSFODNN7EXAMPLE" not in reason and "hunter2" not in reason
    assert "codemode approve crm/add_note --args-file FILE" in reason


async def test_a_known_secret_value_is_not_shown(known_secret: str) -> None:
    reason = await refusal(context(arguments={"customer_id": "CUST-0001", "note": f"key {known_secret}"}))
    assert known_secret not in reason and "--args-file FILE" in reason


async def test_long_arguments_go_through_a_file() -> None:
    reason = await refusal(context(arguments={"customer_id": "CUST-0001", "note": "n" * 600}))
    assert "n" * 100 not in reason
    assert "characters of JSON) to a file and run: codemode approve crm/add_note --args-file FILE" in reason


async def test_arguments_with_pii_placeholders_get_no_line_that_could_not_match() -> None:
    """The program passed a placeholder; the approval must bind the real value, which neither
    the program nor its output may see."""
    call = context(arguments={"customer_id": "CUST-0001", "note": "mail ana@example.com"})
    passed = {"customer_id": "CUST-0001", "note": "mail [EMAIL_1]"}
    assert call.request is not None
    request = ToolCallRequest.model_validate({**call.request.model_dump(), "arguments": passed})
    reason = await refusal(dataclasses.replace(call, request=request))
    assert "ana@example.com" not in reason and "[EMAIL_1]" not in reason
    assert "PII placeholders" in reason and "--args" not in reason


async def test_a_client_that_cannot_be_asked_gets_the_ways_out_with_its_reason() -> None:
    async def unreachable(_: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer(False, "elicitation:c", "the MCP client does not support elicitation", True)

    reason = await refusal(approver=CallbackApprover(unreachable))
    lines = reason.splitlines()
    assert lines[0] == FIRST_LINE
    assert lines[1] == "No approver is available here (the MCP client does not support elicitation)."
    assert "codemode pin --accept-hints crm/add_note" in reason


async def test_a_person_who_says_no_gets_no_ways_out() -> None:
    async def declined(_: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer(False, "terminal", "declined")

    reason = await refusal(approver=CallbackApprover(declined))
    assert reason == "approval for crm/add_note was not given by terminal: declined"


async def test_a_read_only_run_names_how_to_make_a_tool_count_as_read_only() -> None:
    facts = principal_facts(risk="high", pinned=pinned(READ_ONLY))
    refused = await ReadOnlyRunGate().check(context(read_only=True), facts)
    assert isinstance(refused, Deny)
    assert refused.reason.splitlines()[0] == "this run may only read, but crm/add_note is high risk"
    assert "codemode pin --accept-hints crm/add_note" in refused.reason
    assert '[policy.consent] read_only = ["crm/add_note"]' in refused.reason
