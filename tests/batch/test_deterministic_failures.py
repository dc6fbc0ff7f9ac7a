"""A failure that another attempt would repeat (a policy denial, the program's own error before
any call) costs one attempt, not ``--max-attempts``; one that may not repeat is still retried.
The summary counts failed items by reason, and a run of a job that runs nothing says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from codemode import CodeMode
from codemode.batch import BatchOptions, open_job_store
from codemode.ledger import open_ledger
from tests.test_engine_in_memory import approved_in_memory_crm

from .conftest import MakeWorkspace

pytestmark = pytest.mark.anyio


def crm() -> MCPServer:
    app = MCPServer("crm", version="1.0.0")

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(customer_id: str) -> dict[str, str]:
        """Look up one customer."""
        return {"id": customer_id}

    @app.tool()
    def add_note(customer_id: str, text: str) -> str:
        """Add a note (a write: it needs an approval, which a batch cannot give)."""
        return "added"

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    def flaky() -> str:
        """Fail as a server that is having a bad moment does."""
        raise RuntimeError("try again later")

    return app


PROGRAM = """
from servers.crm import add_note, flaky, lookup
mode = INPUT["mode"]
if mode == "denied":
    add_note(customer_id="C1", text="note " + INPUT["id"])
if mode == "typo":
    lookup(customer_id=customr)
if mode == "late":
    lookup(customer_id="C1")
    raise ValueError("a later step failed")
if mode == "flaky_then_denied":
    try:
        flaky()
    except Exception:
        pass
    add_note(customer_id="C1", text="note " + INPUT["id"])
if mode == "read_then_denied":
    lookup(customer_id="C1")
    add_note(customer_id="C1", text="note " + INPUT["id"])
INPUT["id"]
"""


@pytest.mark.integration
async def test_a_run_reports_what_its_gates_denied_and_which_calls_failed(tmp_path: Path) -> None:
    config, transports = await approved_in_memory_crm(tmp_path, crm())
    program = """
from servers.crm import add_note, flaky, lookup
lookup(customer_id="C1")
calls = (lambda: add_note(customer_id="C1", text="x"), flaky, lambda: add_note(customer_id="C2", text="y"))
for call in calls:
    try:
        call()
    except Exception:
        pass
"""
    async with CodeMode(config, transports=transports) as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    assert (result.calls, result.denials, result.failed_calls) == (2, 2, 1)
    assert result.denied == ("consent:crm/add_note",), "one entry per gate and tool"


@pytest.mark.integration
async def test_only_failures_that_may_not_repeat_get_more_attempts(tmp_path: Path) -> None:
    config, transports = await approved_in_memory_crm(tmp_path, crm())
    modes = ["denied", "typo", "read_then_denied", "late", "flaky_then_denied"]
    items = [{"id": f"{mode}-{n}", "mode": mode} for mode in modes for n in range(2)]
    out = tmp_path / "out.jsonl"
    options = BatchOptions(job_id="j", key="id", concurrency=2, max_attempts=3, out=out)
    async with CodeMode(config, transports=transports) as engine:
        results = {r.key: r async for r in engine.batch(PROGRAM, items, options)}
    assert {r.status for r in results.values()} == {"failed"}
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["key"] for line in lines] == [item["id"] for item in items], "the API writes --out too"
    store = open_job_store(config.ledger_path)
    try:
        attempts = {item.key: item.attempts for item in store.items("j")}
        groups = {(g.reason, g.count) for g in _groups(store, "j")}
    finally:
        store.close()
    # Denied (before or after a read) or failed before any call: the next attempt would do the same.
    for mode, expected in [
        ("denied", 1),
        ("typo", 1),
        ("read_then_denied", 1),
        ("late", 3),  # the program failed after a call went through
        ("flaky_then_denied", 3),  # a call failed on the way: the next attempt may take another path
    ]:
        assert [attempts[f"{mode}-{n}"] for n in range(2)] == [expected, expected], mode
    assert ("needs approval: crm/add_note", 4 + 2) in groups  # denied, read_then_denied, flaky_then_denied
    assert ("NameError: name 'customr' is not defined", 2) in groups
    ledger = open_ledger(config.ledger_path, create=False)
    try:
        denied = [c for c in ledger.list_calls(newest_first=False) if c.tool == "add_note"]
    finally:
        ledger.close()
    assert len(denied) == 2 + 2 + 2 * 3, "each denial of an item that is not retried is met once"


def _groups(store: Any, job_id: str) -> list[Any]:
    from codemode.batch import group_failures

    return group_failures(store.failures(job_id))


@pytest.mark.integration
def test_denied_items_take_one_attempt_each_and_the_summary_says_why(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(trusted=False)  # a third-party server: every tool high risk, no approver
    items = ws.items(10)
    with items.open("a", encoding="utf-8") as handle:
        handle.write('{"id": "broken"\n\n["not an object"]\n')
    args = ["batch", str(ws.program()), "--inputs", str(items), "--key", "id", "--job-id", "denied"]
    done = ws.cli(*args, "--max-attempts", "3", "--json")
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert summary["counts"]["failed"] == 10
    assert set(ws.item_attempts("denied").values()) == {1}, "no denied item was run again"
    assert ws.ledger_calls("add_note") == ["denied"] * 10
    [group] = summary["failures"]
    assert (group["status"], group["count"]) == ("failed", 10)
    assert group["reason"] == "needs approval: crm/add_note"
    assert "codemode.CallDenied: denied by the consent gate" in group["detail"]
    assert summary["skipped"] == 2 and [b["line"] for b in summary["skipped_lines"]] == [11, 13]
    assert summary["retry_left"] and summary["nothing_to_run"] is None
    # In words: one line per reason, and the skipped lines counted.
    shown = ws.cli(*args, "--max-attempts", "1")
    assert shown.returncode == 1
    assert "failed 10: needs approval: crm/add_note" in shown.stdout
    assert "skipped 2 input lines: line 11: not valid JSON" in shown.stdout
    # That run ran nothing (each item has had its one attempt), and said why and what to do.
    why = " ".join(shown.stderr.split())
    assert (
        "nothing to run: all 10 items of job denied are settled (10 failed after 1 attempt); "
        "--max-attempts 2 retries the failed items; another --job-id starts over and runs every item"
    ) in why
    assert ws.ledger_calls("add_note") == ["denied"] * 10, "nothing ran"
    # Run again with attempts left, each denied item takes one more: not --max-attempts more.
    again = ws.cli(*args, "--max-attempts", "5", "--json")
    assert json.loads(again.stdout)["ran_now"] == 10
    assert set(ws.item_attempts("denied").values()) == {2}
    assert len(ws.ledger_calls("add_note")) == 20


@pytest.mark.integration
def test_a_failure_on_the_servers_side_is_still_retried(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(crm_fault="fail_before_write")  # every write refused before it is made
    args = ["batch", str(ws.program()), "--inputs", str(ws.items(2)), "--key", "id", "--job-id", "r"]
    done = ws.cli(*args, "--max-attempts", "3", "--json")
    assert json.loads(done.stdout)["counts"]["failed"] == 2
    assert set(ws.item_attempts("r").values()) == {3}
    again = ws.cli(*args, "--max-attempts", "3")
    assert "nothing to run: all 2 items of job r are settled (2 failed after 3 attempts)" in " ".join(
        again.stderr.split()
    )
    assert "--max-attempts 4 retries the failed items" in " ".join(again.stderr.split())
