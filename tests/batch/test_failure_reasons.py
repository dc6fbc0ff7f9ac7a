"""Which failed runs another attempt would repeat, read from the broker's counts (not from the
program's error text), and the reasons a job's failures are grouped under."""

from __future__ import annotations

from typing import Any

import pytest

from codemode.batch import group_failures
from codemode.batch._reasons import failure_of, reason_key
from codemode.engine import RunResult
from codemode.engine._run_result import RunErrorInfo


def failed_run(
    kind: str = "exception", type_: str = "codemode.CallDenied", message: str = "denied", **counts: Any
) -> RunResult:
    error = RunErrorInfo(kind=kind, type=type_, message=message)
    return RunResult(status="error", error=error, run_id="run_1", principal="p", tenant="t", **counts)


@pytest.mark.parametrize(
    ("run", "reason"),
    [
        # Denied before anything reached a server: consent (no approver in a batch), a pin, an
        # argument schema, a resource scope, the principal's grants, a budget of zero calls.
        (failed_run(denials=1, denied=("consent:crm/add_note",)), "needs approval: crm/add_note"),
        (failed_run(denials=1, denied=("tool:crm/add_note",)), "denied by the tool gate: crm/add_note"),
        (
            failed_run(denials=2, denied=("arguments:crm/add_note", "consent:crm/x")),
            "denied by the arguments gate: crm/add_note",
        ),
        (
            failed_run(denials=1, denied=("resource:fs/read_file",)),
            "denied by the resource gate: fs/read_file",
        ),
        (
            failed_run(denials=1, denied=("principal:crm/add_note",)),
            "denied by the principal gate: crm/add_note",
        ),
        (failed_run(denials=1, denied=("budget:crm/add_note",)), "denied by the budget gate: crm/add_note"),
        # A read went through, then a write was denied: a retry reads again and is denied again.
        (
            failed_run(calls=1, denials=1, denied=("consent:memory/create_entities",)),
            "needs approval: memory/create_entities",
        ),
        (
            failed_run(calls=3, denials=1, denied=("arguments:crm/add_note",)),
            "denied by the arguments gate: crm/add_note",
        ),
    ],
)
def test_a_policy_denial_is_not_retried_and_is_counted_under_its_gate_and_tool(
    run: RunResult, reason: str
) -> None:
    failure = failure_of(run)
    assert failure.repeats
    assert failure.text.split("\n") == [reason, "codemode.CallDenied: denied"], "the program's error follows"


@pytest.mark.parametrize(
    ("type_", "message"),
    [
        ("NameError", "name 'cusotmer' is not defined"),
        ("ModuleNotFoundError", "No module named 'servers.tme'"),
        ("TypeError", "add_note() missing 1 required keyword-only argument: 'text'"),
        ("KeyError", "'customer'"),
        ("SyntaxError", "invalid syntax"),
    ],
)
def test_the_programs_own_error_before_any_call_is_not_retried(type_: str, message: str) -> None:
    failure = failure_of(failed_run(type_=type_, message=message))
    assert failure.repeats and failure.text == f"{type_}: {message}"


@pytest.mark.parametrize(
    "run",
    [
        # A call failed on the way (a server error, a timeout, a refusal): the next may not.
        failed_run(calls=1, failed_calls=1, type_="codemode.CallFailed", message="server crashed"),
        failed_run(calls=2, failed_calls=1, denials=1, denied=("consent:crm/add_note",)),
        # The program's error after calls went through: what they returned may differ next time.
        failed_run(calls=1, type_="ValueError", message="a later step failed"),
        # Denied by the budget after calls went through: its wall-time budget runs out on a slow server.
        failed_run(calls=4, denials=1, denied=("budget:crm/add_note",)),
        # A denial the broker gives around side effects: counted, not as a policy denial.
        failed_run(calls=1, denials=1, type_="codemode.CallDenied", message="denied by side_effects"),
        # Not the program's error: timed out, out of memory, killed, the sandbox failed.
        failed_run(kind="timeout", type_="Timeout", message="over the wall time"),
        failed_run(kind="oom", type_="MemoryError", message="out of memory"),
        failed_run(kind="killed", type_="Killed", message="killed"),
        failed_run(kind="sandbox", type_="SandboxError", message="the runtime failed"),
        failed_run(kind="channel", type_="ChannelError", message="closed", denied=("consent:crm/x",)),
        # A call whose outcome is unknown: never retried blindly (the item becomes unknown).
        failed_run(unknown_outcomes=1, denials=1, denied=("consent:crm/add_note",)),
    ],
)
def test_a_failure_that_may_not_repeat_is_retried(run: RunResult) -> None:
    failure = failure_of(run)
    assert not failure.repeats
    assert run.error is not None and failure.text.split("\n")[-1] == f"{run.error.type}: {run.error.message}"
    if (
        "consent:crm/add_note" in run.denied and run.error.kind == "exception"
    ):  # counted under it all the same
        assert failure.text.split("\n")[0] == "needs approval: crm/add_note"


def test_values_that_vary_per_item_do_not_split_a_group() -> None:
    same = [
        ("KeyError: 'item-0001'", "KeyError: 'item-0002'"),
        ('ValueError: bad value "x" at 3', 'ValueError: bad value "yy" at 12'),
        ("CallFailed: run run_5f2c41d07be3 timed out", "CallFailed: run run_00aa11bb22cc timed out"),
        (
            "RuntimeError: receipt 3f2a9c1e-0d4b-4a8e-9b1c-2d3e4f5a6b7c lost",
            "RuntimeError: receipt 0c1d2e3f-aaaa-4bbb-8ccc-1234567890ab lost",
        ),
        (
            "needs approval: crm/add_note\ncodemode.CallDenied: ... {'a': 1}",
            "needs approval: crm/add_note\nother detail",
        ),
    ]
    for one, other in same:
        assert reason_key(one) == reason_key(other), (one, other)
    different = [
        ("needs approval: crm/add_note", "needs approval: crm/add_note2"),
        ("needs approval: crm/add_note", "denied by the tool gate: crm/add_note"),
        ("KeyError: 'a'", "IndexError: 'a'"),
    ]
    for one, other in different:
        assert reason_key(one) != reason_key(other), (one, other)


def test_failures_are_grouped_by_status_and_reason_largest_first() -> None:
    rows = [
        *(
            ("failed", 1, "needs approval: memory/create_entities\nCallDenied: the full reason")
            for _ in range(50)
        ),
        ("failed", 3, "KeyError: 'item-1'"),
        ("failed", 2, "KeyError: 'item-2'"),
        ("unverified", 1, "the verify program returned False, not True"),
        ("unknown", 1, "1 call(s) with an unknown outcome; see 'codemode ledger reconcile'"),
        ("failed", 1, None),
    ]
    groups = group_failures(rows)  # type: ignore[arg-type]
    shown = [(g.status, g.count, g.reason, g.attempts) for g in groups]
    assert shown[:2] == [
        ("failed", 50, "needs approval: memory/create_entities", (1, 1)),
        # Items that differ in a value: what they share is shown, not the first item's value.
        ("failed", 2, "KeyError: '…'", (2, 3)),
    ]
    assert groups[0].detail == "CallDenied: the full reason"
    assert ("unverified", 1, "the verify program returned False, not True", (1, 1)) in shown
    assert ("failed", 1, "no reason recorded", (1, 1)) in shown
    assert len(groups) == 5
