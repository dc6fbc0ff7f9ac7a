"""``--out`` holds every settled item after a Ctrl-C or a SIGKILL, and no item twice after the
resume; ``--reverify`` checks unverified items again without running their writes again."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import MakeWorkspace, Workspace

SETTLED = {"done", "failed", "unknown", "unverified"}


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def out_keys(out: Path) -> list[str]:
    return [json.loads(line)["key"] for line in out.read_text(encoding="utf-8").splitlines()]


def settled(ws: Workspace, job_id: str) -> set[str]:
    return {key for key, status in ws.item_states(job_id).items() if status in SETTLED}


@pytest.mark.integration
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_out_holds_every_settled_item_after_a_kill_and_none_twice_after_the_resume(
    make_workspace: MakeWorkspace, signum: signal.Signals
) -> None:
    ws = make_workspace(crm_fault="slow=0.2")
    out = ws.root / "out.jsonl"
    items = ws.items(30)
    args = ["batch", str(ws.program()), "--inputs", str(items), "--key", "id", "--job-id", "k"]
    process = ws.popen(*args, "--concurrency", "2", "--out", str(out))
    wait_for(lambda: len(settled(ws, "k")) >= 6, 300, "six settled items")
    os.killpg(process.pid, signum)  # the whole group, as Ctrl-C in a terminal
    process.wait(timeout=120)
    states = ws.item_states("k")
    done_then = settled(ws, "k")
    assert len(done_then) < 30, "killed before the end"
    keys = out_keys(out)
    assert len(keys) == len(set(keys)), "no item twice"
    if signum == signal.SIGKILL:
        # No clean-up ran: each line was written before the store marked its item settled.
        assert done_then <= set(keys)
        assert set(keys) - done_then <= {key for key, status in states.items() if status == "running"}
    else:
        # Written anew on the way out: every settled item, in input order.
        assert keys == sorted(done_then)
    # The resume runs the rest; the file then lists every item once, whatever ran when.
    resumed = ws.cli(*args, "--out", str(out), "--json")
    assert resumed.returncode in (0, 1), resumed.stderr
    keys = out_keys(out)
    assert keys == sorted(f"item-{n:04d}" for n in range(30))
    statuses = {json.loads(line)["status"] for line in out.read_text(encoding="utf-8").splitlines()}
    assert statuses <= {"done", "unknown"}, "an item cut off inside its call is unknown, never re-sent"


@pytest.mark.integration
def test_reverify_checks_unverified_items_again_without_running_their_writes(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace()
    program = ws.program(
        """
from servers.crm import add_note
if not INPUT.get("skip"):
    add_note(customer_id=INPUT["customer"], text=f"batch note {INPUT['id']}")
{"wrote": f"batch note {INPUT['id']}"}
""",
        "write.py",
    )
    verify = ws.program(
        """
from servers.crm import get_customer
notes = [n["text"] for n in get_customer(customer_id=INPUT["customer"])["notes"]]
RESULT["wrote"] in notes
""",
        "verify.py",
    )
    items = ws.root / "items.jsonl"
    rows = [{"id": "ok", "customer": "CUST-0001"}, {"id": "late", "customer": "CUST-0002", "skip": True}]
    items.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    args = [
        "batch",
        str(program),
        "--inputs",
        str(items),
        "--key",
        "id",
        "--job-id",
        "v",
        "--verify",
        str(verify),
    ]
    first = ws.cli(*args, "--json")
    assert first.returncode == 1 and json.loads(first.stdout)["counts"]["unverified"] == 1
    assert ws.item_states("v") == {"ok": "done", "late": "unverified"}, first.stderr
    # Without --reverify, the job has nothing to run, and says how to check the item again.
    idle = ws.cli(*args)
    assert "--reverify checks the unverified items again" in " ".join(idle.stderr.split())
    # The late item's write takes effect by another way (as a slow server's would).
    late = ws.root / "late.py"
    late.write_text(
        'from servers.crm import add_note\nadd_note(customer_id="CUST-0002", text="batch note late")\n',
        encoding="utf-8",
    )
    assert ws.cli("run", str(late)).returncode == 0
    writes, recorded = ws.crm_writes(), ws.ledger_calls("add_note")
    assert writes == ["batch note ok", "batch note late"]
    out = ws.root / "out.jsonl"
    again = ws.cli(*args, "--reverify", "--json", "--out", str(out))
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["ran_now"], summary["counts"]["done"], summary["counts"]["unverified"]) == (1, 2, 0)
    assert ws.crm_writes() == writes, "no write was made again"
    assert ws.ledger_calls("add_note") == recorded, "nor even replayed: the program did not run"
    lines = {row["key"]: row for row in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert lines["late"]["status"] == "done" and lines["late"]["result"] == {"wrote": "batch note late"}
    assert ws.item_states("v") == {"ok": "done", "late": "done"}


@pytest.mark.integration
def test_reverify_needs_the_verify_program(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace()
    done = ws.cli("batch", str(ws.program()), "--inputs", str(ws.items(1)), "--reverify")
    assert done.returncode == 2
    assert "--reverify checks items with the job's verify program: give it with --verify" in done.stderr
