"""Faults with the real crm server counting every write durably in its own log.

Whatever goes wrong - the server dies mid-call, writes and never answers, says it failed after
writing, or the broker itself is killed between sending and recording - a side effect happens
at most once: an outcome that is not known is recorded ``unknown``, never retried, and settled
by reconciliation; idempotency keys make retries replays. Each test reports the writes it saw
next to the operations it asked for; the session prints "duplicate side effects: N".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp
import psutil
import pytest
from mcp.client.stdio import StdioServerParameters

pytestmark = pytest.mark.anyio

Deploy = Any  # the fixtures of tests/e2e/conftest.py
Deployment = Any
Eventually = Callable[..., Any]
Report = Callable[[str, int, int], None]

HERE = Path(__file__).resolve().parent
CRM = HERE.parents[1] / "examples" / "servers" / "crm_server.py"
VICTIM = HERE / "fixtures" / "broker_victim.py"
WRITES_NEED_NO_APPROVAL = {"consent": {"never": ["crm/add_note", "crm/record_payment"]}}


def unknown_calls(deployment: Deployment) -> list[dict[str, Any]]:
    listed = deployment.cli("ledger", "reconcile", "--json")
    assert listed.exit_code == 0, listed.output
    return list(json.loads(listed.stdout)["unknown"])


def reconcile_succeeded(deployment: Deployment, call_id: str, receipt: str) -> dict[str, Any]:
    settled = deployment.cli(
        "ledger",
        "reconcile",
        call_id,
        "--succeeded",
        "--receipt",
        receipt,
        "--evidence",
        f"crm list_writes shows {receipt} for this note",
        "--json",
    )
    assert settled.exit_code == 0, settled.output
    return dict(json.loads(settled.stdout)["call"])


async def read_back_receipts(deployment: Deployment, customer_id: str) -> list[str]:
    """Ask the crm server directly (a fresh process on the same state, no faults) what it wrote."""
    params = StdioServerParameters(
        command=sys.executable, args=[str(CRM)], env={"CRM_STATE_DIR": str(deployment.crm_state)}
    )
    async with mcp.Client(params) as client:
        listed = await client.call_tool("list_writes", {"customer_id": customer_id, "tool": "add_note"})
    assert listed.structured_content is not None
    return [w["receipt_id"] for w in listed.structured_content["writes"]]


def report_side_effects(report: Report, deployment: Deployment, scenario: str, *, expected: int) -> None:
    """Writes the server committed vs distinct operations the ledger says may have executed."""
    operations = deployment.executed_operations()
    assert operations == expected, (scenario, operations)
    report(scenario, operations, deployment.crm_write_count())


ONE_NOTE = """
import codemode_runtime as rt
from servers.crm import add_note
try:
    outcome = ["ok", add_note(customer_id=CUSTOMER, text="exactly once", _idempotency_key=KEY)]
except rt.CallFailed as exc:
    outcome = ["failed", exc.reason, exc.outcome_unknown]
except rt.CallDenied as exc:
    outcome = ["denied", exc.gate, exc.reason]
except rt.ToolError as exc:
    outcome = ["tool_error", exc.message]
outcome
"""


def one_note(customer: str, key: str, *, twice: bool = False) -> str:
    program = ONE_NOTE.replace("CUSTOMER", repr(customer)).replace("KEY", repr(key))
    if twice:  # the program itself retries with the same key
        program = program.replace("outcome\n", "first = outcome\n") + program.replace(
            "import codemode_runtime as rt\nfrom servers.crm import add_note\n", ""
        ).replace("outcome\n", "[first, outcome]\n")
    return program


@pytest.mark.integration
async def test_a_server_killed_mid_call_leaves_the_call_unknown_and_it_is_never_retried(
    deploy: Deploy, eventually: Eventually, side_effects: Report
) -> None:
    deployment = deploy(policy=WRITES_NEED_NO_APPROVAL, crm_fault="hang_after_write", call_timeout=60)
    outcome: dict[str, Any] = {}
    async with deployment.engine() as engine:

        async def run() -> None:
            outcome["result"] = await engine.run(one_note("CUST-0005", "kill-1", twice=True))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await eventually(lambda: deployment.crm_write_count() == 1, what="the write to be committed")
            servers = deployment.crm_servers()
            assert servers, "the crm server process is running"
            for proc in servers:
                proc.send_signal(signal.SIGKILL)
    result = outcome["result"]
    assert result.status == "ok", result.error
    first, retry = result.result
    assert first[0] == "failed" and first[2] is True, first
    assert "connection lost" in first[1] or "no answer" in first[1], first
    # The program's own retry is refused before anything is sent: the server is gone (tool gate),
    # and were it back, the key's unknown outcome would refuse it (side-effects gate).
    assert retry[0] == "denied" and retry[1] in ("tool", "side_effects"), retry
    assert deployment.crm_write_count() == 1
    calls = [c for c in deployment.calls(result.run_id) if c.tool == "add_note"]
    assert [(c.state, c.attempt) for c in calls] == [("unknown", 1), ("denied", None)]
    assert [c["call_id"] for c in unknown_calls(deployment)] == [calls[0].call_id]
    report_side_effects(side_effects, deployment, "server killed mid-call", expected=1)


@pytest.mark.integration
async def test_a_server_killed_before_writing_is_unknown_until_reconciled_as_failed_then_runs_once(
    deploy: Deploy, eventually: Eventually, side_effects: Report
) -> None:
    deployment = deploy(policy=WRITES_NEED_NO_APPROVAL, crm_fault="hang_before_write", call_timeout=60)
    outcome: dict[str, Any] = {}
    async with deployment.engine() as engine:

        async def run() -> None:
            outcome["result"] = await engine.run(one_note("CUST-0012", "kill-2"))

        def sent() -> bool:
            if not deployment.ledger_path.exists():
                return False
            return any(c.tool == "add_note" and c.state == "sent" for c in deployment.calls())

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await eventually(sent, what="the call to be sent")
            for proc in deployment.crm_servers():
                proc.send_signal(signal.SIGKILL)
    first = outcome["result"].result
    assert first[0] == "failed" and first[2] is True, first
    assert deployment.crm_write_count() == 0
    (listed,) = unknown_calls(deployment)
    assert await read_back_receipts(deployment, "CUST-0012") == []
    look = ["--read-back", "crm/list_writes", "--args", json.dumps({"customer_id": "CUST-0012"})]
    look += ["--expect", "exactly once", "--failed-if-missing"]
    settled = await deployment.acli("ledger", "reconcile", listed["call_id"], *look, "--json")
    assert settled.exit_code == 0, settled.output
    record = json.loads(settled.stdout)["call"]
    assert (record["state"], record["resolved_by"]) == ("reconciled_failed", "read-back:crm/list_writes")

    deployment.heal_crm()
    async with deployment.engine() as engine:  # the key is free again: the retry runs, once
        again = await engine.run(one_note("CUST-0012", "kill-2", twice=True))
    (state, done), (_, replayed) = again.result  # type: ignore[misc]
    assert state == "ok" and replayed == done
    assert [w["receipt_id"] for w in deployment.crm_writes()] == [done["receipt_id"]]
    calls = [c for c in deployment.calls() if c.tool == "add_note"]
    assert [(c.state, c.attempt) for c in calls] == [
        ("reconciled_failed", 1),
        ("succeeded", 2),
        ("replayed", None),
    ]
    report_side_effects(side_effects, deployment, "server killed before writing, then retried", expected=1)


@pytest.mark.integration
async def test_a_server_that_writes_and_never_answers_is_unknown_once_then_reconciled_from_a_read_back(
    deploy: Deploy, side_effects: Report
) -> None:
    deployment = deploy(policy=WRITES_NEED_NO_APPROVAL, crm_fault="hang_after_write", call_timeout=1.5)
    read_back = one_note("CUST-0006", "hang-1") + (
        "from servers.crm import list_writes\n"
        "[outcome, [w['receipt_id'] for w in list_writes(customer_id='CUST-0006')['writes']]]\n"
    )
    async with deployment.engine() as engine:
        hung = await engine.run(read_back)
        assert hung.status == "ok", hung.error
        (failed, reason, unknown), receipts = hung.result  # type: ignore[misc]
        assert (failed, unknown) == ("failed", True) and "call_timeout = 1.5 s" in reason
        assert len(receipts) == 1, "the server did write, once: no retry"
        assert deployment.crm_write_count() == 1

        (listed,) = unknown_calls(deployment)
        assert listed["tool"] == "add_note" and listed["state"] == "unknown"
        assert "reconcile" in listed["advice"]
        settled = reconcile_succeeded(deployment, listed["call_id"], receipts[0])
        assert (settled["state"], settled["receipt"]) == ("reconciled_succeeded", receipts[0])

        again = await engine.run(one_note("CUST-0006", "hang-1"))
    assert again.result[0] == "ok", again.result  # type: ignore[index]
    assert again.result[1]["reconciled"] == "succeeded"  # type: ignore[index]
    assert again.result[1]["receipt"] == receipts[0]  # type: ignore[index]
    assert deployment.crm_write_count() == 1, "the key's retry was replayed, not sent"
    assert unknown_calls(deployment) == []
    report_side_effects(side_effects, deployment, "write then no answer", expected=1)


async def kill_the_broker_once_its_write_is_out(
    deployment: Deployment, eventually: Eventually, code: str, tmp_path: Path
) -> None:
    """Run ``code`` in a broker process of its own; SIGKILL it (and what it left behind) once its
    ``add_note`` is sent and executed but not answered (the crm hangs after writing)."""
    program = tmp_path / "program.py"
    program.write_text(code, encoding="utf-8")
    victim = await anyio.open_process(
        [sys.executable, str(VICTIM), str(deployment.config_path), str(program)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    family: set[psutil.Process] = set()
    try:

        def sent() -> bool:
            with contextlib.suppress(psutil.Error):
                family.update(psutil.Process(victim.pid).children(recursive=True))
            if deployment.crm_write_count() != 1 or not deployment.ledger_path.exists():
                return False
            return any(c.tool == "add_note" and c.state == "sent" for c in deployment.calls())

        await eventually(sent, timeout=60, what="the write to be sent, executed and not answered")
        os.kill(victim.pid, signal.SIGKILL)  # the broker, between send and recording the answer
        with anyio.fail_after(30):
            assert await victim.wait() == -signal.SIGKILL
    finally:
        if victim.returncode is None:
            victim.kill()
        for proc in family:  # its servers and sandbox, left behind
            with contextlib.suppress(psutil.Error):
                proc.kill()
        await anyio.to_thread.run_sync(lambda: psutil.wait_procs(list(family), timeout=10))
        await victim.aclose()


@pytest.mark.integration
async def test_a_broker_killed_between_send_and_record_comes_back_with_the_call_unknown(
    deploy: Deploy, eventually: Eventually, side_effects: Report, tmp_path: Path
) -> None:
    deployment = deploy(policy=WRITES_NEED_NO_APPROVAL, crm_fault="hang_after_write", call_timeout=120)
    await kill_the_broker_once_its_write_is_out(
        deployment, eventually, one_note("CUST-0008", "crash-1"), tmp_path
    )

    with deployment.ledger() as store:  # a restarted broker opens it with recover=True; same thing
        report = store.recover()
        calls = [c for c in store.list_calls(limit=100) if c.tool == "add_note"]
        runs = store.list_runs()
    (call,) = calls
    assert report.calls_unknown == (call.call_id,)
    assert call.state == "unknown" and "is gone" in (call.reason or ""), call
    assert [r.status for r in runs] == ["interrupted"]
    assert [c["call_id"] for c in unknown_calls(deployment)] == [call.call_id]

    (receipt,) = await read_back_receipts(deployment, "CUST-0008")
    look = ["--read-back", "crm/get_receipt", "--args", json.dumps({"receipt_id": receipt})]
    settled = await deployment.acli("ledger", "reconcile", call.call_id, *look, "--expect", receipt, "--json")
    assert settled.exit_code == 0, settled.output
    record = json.loads(settled.stdout)["call"]
    assert (record["state"], record["receipt"]) == ("reconciled_succeeded", receipt)
    assert deployment.crm_write_count() == 1

    deployment.heal_crm()
    async with deployment.engine() as engine:  # the broker restarted, the server healthy again
        again = await engine.run(one_note("CUST-0008", "crash-1"))
    assert again.result[0] == "ok" and again.result[1]["receipt"] == receipt, again.result  # type: ignore[index]
    assert deployment.crm_write_count() == 1
    report_side_effects(side_effects, deployment, "broker killed between send and record", expected=1)


READS_THEN_ONE_NOTE = (
    "from servers.crm import get_customer\n"
    "for n in range(1, 31):\n"
    "    get_customer(customer_id=f'CUST-{n % 20 + 1:04d}')\n"
)


@pytest.mark.integration
async def test_a_broker_killed_with_reads_unrecorded_leaves_a_ledger_that_verifies_and_one_write(
    deploy: Deploy, eventually: Eventually, side_effects: Report, tmp_path: Path
) -> None:
    """Reads are recorded after the fact, in batches: a crash may lose their records, never a
    write's, and never leaves half a record behind."""
    deployment = deploy(policy=WRITES_NEED_NO_APPROVAL, crm_fault="hang_after_write", call_timeout=120)
    program = READS_THEN_ONE_NOTE + one_note("CUST-0009", "crash-2")
    await kill_the_broker_once_its_write_is_out(deployment, eventually, program, tmp_path)

    with deployment.ledger() as store:
        store.recover()
        calls = store.list_calls(limit=100)
        assert store.verify().ok
    reads = [c for c in calls if c.tool == "get_customer"]
    (write,) = [c for c in calls if c.tool == "add_note"]
    assert write.state == "unknown", write
    assert len(reads) <= 30 and {c.state for c in reads} <= {"succeeded"}, "whole records or none"
    assert deployment.crm_write_count() == 1
    report_side_effects(side_effects, deployment, "broker killed with reads unrecorded", expected=1)


@pytest.mark.integration
async def test_two_concurrent_calls_with_one_key_write_once_and_share_the_receipt(
    deploy: Deploy, side_effects: Report
) -> None:
    deployment = deploy(policy=WRITES_NEED_NO_APPROVAL, crm_fault="slow=0.3")
    program = """
import codemode_runtime as rt
from servers.crm import add_note
call = {"customer_id": "CUST-0009", "text": "exactly once", "_idempotency_key": KEY}
[r["receipt_id"] for r in rt.parallel(add_note, [call, call], max_workers=2)]
"""
    async with deployment.engine() as engine:
        same_run = await engine.run(program.replace("KEY", "'pair-1'"))
        results: list[Any] = []

        async def run() -> None:
            results.append(await engine.run(program.replace("KEY", "'pair-2'")))

        async with anyio.create_task_group() as tg:  # and two runs at once, same key
            tg.start_soon(run)
            tg.start_soon(run)
    assert same_run.status == "ok", same_run.error
    first, second = same_run.result  # type: ignore[misc]
    assert first == second
    across = [r.result for r in results]
    assert len({receipt for pair in across for receipt in pair}) == 1, across
    writes = deployment.crm_writes()
    assert len(writes) == 2, "one write per key"
    assert {w["receipt_id"] for w in writes} == {first, across[0][0]}
    states = sorted(c.state for c in deployment.calls() if c.tool == "add_note")
    assert states == ["replayed"] * 4 + ["succeeded"] * 2
    report_side_effects(side_effects, deployment, "one key, concurrent calls (2 keys)", expected=2)


@pytest.mark.integration
async def test_the_same_key_with_other_arguments_is_a_conflict_and_writes_nothing(
    deploy: Deploy, side_effects: Report
) -> None:
    deployment = deploy(policy=WRITES_NEED_NO_APPROVAL)
    program = """
import codemode_runtime as rt
from servers.crm import record_payment
first = record_payment(customer_id="CUST-0010", amount_cents=500, reference="INV-1", _idempotency_key="pay-1")
try:
    record_payment(customer_id="CUST-0010", amount_cents=50000, reference="INV-1", _idempotency_key="pay-1")
    second = "paid twice"
except rt.CallDenied as exc:
    second = [exc.gate, exc.reason]
[first["receipt_id"], second]
"""
    async with deployment.engine() as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    receipt, (gate, reason) = result.result  # type: ignore[misc]
    assert gate == "side_effects" and "different arguments" in reason
    writes = deployment.crm_writes()
    assert [(w["receipt_id"], w["arguments"]["amount_cents"]) for w in writes] == [(receipt, 500)]
    report_side_effects(side_effects, deployment, "same key, other arguments", expected=1)


@pytest.mark.integration
async def test_a_failure_reported_after_the_write_is_replayed_not_retried(
    deploy: Deploy, side_effects: Report
) -> None:
    deployment = deploy(policy=WRITES_NEED_NO_APPROVAL, crm_fault="fail_after_write")
    async with deployment.engine() as engine:
        result = await engine.run(one_note("CUST-0011", "fail-1", twice=True))
        later = await engine.run(one_note("CUST-0011", "fail-1"))
    first, retry = result.result  # type: ignore[misc]
    assert first[0] == "tool_error" and "internal error (500)" in first[1], first
    assert retry == first, "the stored error is replayed for the key"
    assert later.result == first  # type: ignore[comparison-overlap]
    assert deployment.crm_write_count() == 1
    report_side_effects(side_effects, deployment, "server says failure after writing", expected=1)


def test_duplicate_side_effects_over_the_fault_runs_is_zero(side_effect_runs: list[Any]) -> None:
    """Runs last in this module: prints the figure from the fault tests above."""
    if not side_effect_runs:
        pytest.skip("no fault test ran in this session")
    writes = sum(run.writes for run in side_effect_runs)
    operations = sum(run.operations for run in side_effect_runs)
    duplicates = sum(run.duplicates for run in side_effect_runs)
    print(f"\nduplicate side effects: {duplicates} ({writes} writes for {operations} distinct operations)")
    assert duplicates == 0
