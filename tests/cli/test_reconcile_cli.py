"""`codemode ledger reconcile --read-back` settles unknown calls from the server's own records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters

from codemode.calls import RunBinding, ToolCallRequest
from codemode.cli._main import cli
from codemode.ledger import CallIntent, Fresh, open_ledger

pytestmark = pytest.mark.integration

CRM = Path(__file__).resolve().parents[2] / "examples" / "servers" / "crm_server.py"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    state = tmp_path / "crm-state"
    config = tmp_path / "codemode.toml"
    config.write_text(
        f"[servers.crm]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(CRM))}]\n"
        f"trusted = true\nenv = {{ CRM_STATE_DIR = {json.dumps(str(state))} }}\n"
    )
    runner = CliRunner()
    for args in (["sync"], ["pin", "--approve"]):
        assert runner.invoke(cli, [*args, "--config", str(config)]).exit_code == 0
    return config


def record_payment_directly(state_dir: Path, reference: str) -> None:
    """The write happened on the server; codemode just never heard back."""

    async def pay() -> None:
        params = StdioServerParameters(
            command=sys.executable, args=[str(CRM)], env={"CRM_STATE_DIR": str(state_dir)}
        )
        async with Client(params) as client:
            result = await client.call_tool(
                "record_payment", {"customer_id": "CUST-0003", "amount_cents": 500, "reference": reference}
            )
            assert not result.is_error

    anyio.run(pay)


def unknown_call(config: Path, reference: str) -> str:
    binding = RunBinding(run_id="run-x", principal="local", tenant="default", trace_id="t")
    request = ToolCallRequest(
        seq=1,
        server="crm",
        tool="record_payment",
        schema_hash="sha256:" + "0" * 64,
        arguments={"customer_id": "CUST-0003", "amount_cents": 500, "reference": reference},
    )
    ledger = open_ledger(config.parent / "codemode.db")
    try:
        ledger.begin_run(binding, "digest")
        reservation = ledger.reserve(CallIntent.from_request(binding, request), send=True)
        assert isinstance(reservation, Fresh)
        ledger.mark_unknown(reservation.call_id, "no answer within call_timeout")
        return reservation.call_id
    finally:
        ledger.close()


def reconcile(config: Path, *args: str) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["ledger", "reconcile", *args, "--json", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_read_back_that_finds_the_write_settles_the_call_as_succeeded(workspace: Path) -> None:
    record_payment_directly(workspace.parent / "crm-state", "INV-READBACK-1")
    call_id = unknown_call(workspace, "INV-READBACK-1")
    listed = reconcile(workspace)
    assert [c["call_id"] for c in listed["unknown"]] == [call_id]  # type: ignore[index]
    args = json.dumps({"reference": "INV-READBACK-1"})
    settled = reconcile(
        workspace, call_id, "--read-back", "crm/list_writes", "--args", args, "--expect", "INV-READBACK-1"
    )
    assert settled["call"]["state"] == "reconciled_succeeded"  # type: ignore[index]
    assert reconcile(workspace)["unknown"] == []


def test_a_read_back_that_finds_nothing_leaves_it_unknown_or_fails_it_when_asked(workspace: Path) -> None:
    call_id = unknown_call(workspace, "INV-NEVER-WRITTEN")
    args = json.dumps({"reference": "INV-NEVER-WRITTEN"})
    common = [call_id, "--read-back", "crm/list_writes", "--args", args, "--expect", "INV-NEVER-WRITTEN"]
    assert reconcile(workspace, *common)["call"]["state"] == "unknown"  # type: ignore[index]
    assert reconcile(workspace, *common, "--failed-if-missing")["call"]["state"] == "reconciled_failed"  # type: ignore[index]


def test_a_read_back_through_a_side_effecting_tool_is_refused(workspace: Path) -> None:
    call_id = unknown_call(workspace, "INV-Z")
    result = CliRunner().invoke(
        cli,
        [
            "ledger",
            "reconcile",
            call_id,
            "--read-back",
            "crm/add_note",
            "--expect",
            "x",
            "--config",
            str(workspace),
        ],
    )
    assert result.exit_code != 0
    assert "not marked read-only" in result.output


def test_a_read_back_is_a_gated_call_that_leaves_its_own_ledger_row(workspace: Path) -> None:
    call_id = unknown_call(workspace, "INV-ROW-1")
    args = json.dumps({"reference": "INV-ROW-1"})
    reconcile(workspace, call_id, "--read-back", "crm/list_writes", "--args", args, "--expect", "INV-ROW-1")
    with open_ledger(workspace.parent / "codemode.db") as ledger:
        reads = [c for c in ledger.list_calls(limit=100) if c.tool == "list_writes"]
    assert len(reads) == 1 and reads[0].state == "succeeded", "the read-back itself is on the record"
    assert reads[0].run_id != "run-x"


def test_a_read_back_through_a_tool_the_policy_denies_is_refused_and_recorded(workspace: Path) -> None:
    text = workspace.read_text() + '\n[policy.principals.local]\ndeny_tools = ["crm/list_writes"]\n'
    workspace.write_text(text)
    call_id = unknown_call(workspace, "INV-DENIED")
    args = json.dumps({"reference": "INV-DENIED"})
    result = CliRunner().invoke(
        cli,
        [
            *("ledger", "reconcile", call_id, "--read-back", "crm/list_writes", "--args", args),
            *("--expect", "INV-DENIED", "--config", str(workspace)),
        ],
    )
    assert result.exit_code != 0
    assert "refused the read-back call" in result.output and "may not use crm/list_writes" in result.output
    with open_ledger(workspace.parent / "codemode.db") as ledger:
        denied = [c for c in ledger.list_calls(limit=100) if c.tool == "list_writes"]
        unknown = ledger.get_call(call_id)
    assert [c.state for c in denied] == ["denied"]
    assert unknown is not None and unknown.state == "unknown", "nothing was settled"
