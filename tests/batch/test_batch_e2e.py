"""``codemode batch`` end to end: a real crm server, real sandboxes, real SIGKILLs.

The figure that matters is the server's own write log: after a kill and a resume, every item
is done and the crm server committed exactly one write per item (0 duplicates, 0 losses).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable

import psutil
import pytest

from codemode.sandbox._docker import POOL_LABEL
from codemode.sandbox._docker_api import docker_api

from .conftest import MakeWorkspace, Workspace

pytestmark = pytest.mark.slow


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def kill_group(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def batch_args(ws: Workspace, items: int, job: str, *extra: str) -> list[str]:
    return [
        "batch",
        str(ws.program()),
        "--inputs",
        str(ws.items(items)),
        "--key",
        "id",
        "--job-id",
        job,
        *extra,
    ]


def settle_unknown_notes(ws: Workspace) -> int:
    """Reconcile every unknown add_note by reading the crm server's write log; how many there were."""
    listed = ws.cli("ledger", "reconcile", "--json")
    assert listed.returncode == 0, listed.stderr
    unknown = json.loads(listed.stdout)["unknown"]
    for call in unknown:
        arguments = call["arguments"]
        look = json.dumps({"customer_id": arguments["customer_id"], "tool": "add_note"})
        settled = ws.cli(
            *("ledger", "reconcile", call["call_id"], "--read-back", "crm/list_writes", "--args", look),
            *("--expect", arguments["text"], "--failed-if-missing", "--json"),
        )
        assert settled.returncode == 0, settled.stderr
    return len(unknown)


def test_a_job_killed_halfway_resumes_with_every_item_done_and_no_duplicate_write(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace(crm_fault="slow=0.01")
    process = ws.popen(*batch_args(ws, 200, "kill-me", "--concurrency", "4"))
    done = lambda: sum(s == "done" for s in ws.item_states("kill-me").values()) >= 100  # noqa: E731
    wait_for(done, 300, "half of the items")
    kill_group(process)
    states = ws.item_states("kill-me")
    assert 100 <= sum(s == "done" for s in states.values()) < 200, "killed halfway"
    resumed = ws.cli(*batch_args(ws, 200, "kill-me", "--resume", "--json"))
    summary = json.loads(resumed.stdout)
    assert summary["resumed"] and summary["counts"]["failed"] == 0, resumed.stderr
    # Items whose call was in flight at the kill are unknown: settle each from the server's own
    # records (what an operator does), then run just those items again.
    settle_unknown_notes(ws)
    out = str(ws.root / "out.jsonl")
    final = ws.cli(*batch_args(ws, 200, "kill-me", "--retry-unknown", "--json", "--out", out))
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout)["counts"]["done"] == 200
    writes = ws.crm_writes()
    assert len(writes) == 200, f"{len(writes)} writes for 200 items"
    assert len(set(writes)) == 200, "no note was written twice"
    lines = (ws.root / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 200 and all(json.loads(line)["status"] == "done" for line in lines)
    again = ws.cli(*batch_args(ws, 200, "kill-me", "--json"))
    assert again.returncode == 0 and json.loads(again.stdout)["ran_now"] == 0, "a finished job runs nothing"
    assert len(ws.crm_writes()) == 200


def test_a_kill_during_a_call_leaves_that_item_unknown_and_it_is_never_resent(
    make_workspace: MakeWorkspace,
) -> None:
    ws = make_workspace(crm_fault="slow=2")
    process = ws.popen(*batch_args(ws, 4, "mid-call", "--concurrency", "1"))
    # Killed once the ledger says a call was sent (the server then sleeps 2 s before it answers):
    # not after a guessed delay, which a loaded machine may not have reached.
    wait_for(lambda: ws.calls_in_flight() > 0, 120, "a call in flight")
    kill_group(process)
    resumed = ws.cli(*batch_args(ws, 4, "mid-call", "--resume", "--json"))
    assert resumed.returncode == 1, "an unknown item makes the job fail"
    summary = json.loads(resumed.stdout)
    assert summary["counts"]["unknown"] == 1 and summary["counts"]["done"] == 3
    assert len(ws.crm_writes()) == 3, "the unknown call was not sent again"
    listed = ws.cli("ledger", "reconcile", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["unknown"]) == 1, "reconcile lists it"
    second = ws.cli(*batch_args(ws, 4, "mid-call", "--json"))
    assert json.loads(second.stdout)["ran_now"] == 0, "unknown items are left for reconcile"


def test_an_item_whose_write_did_not_take_effect_is_unverified(make_workspace: MakeWorkspace) -> None:
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
    items.write_text(
        json.dumps({"id": "ok", "customer": "CUST-0001"})
        + "\n"
        + json.dumps({"id": "lost", "customer": "CUST-0002", "skip": True})
        + "\n",
        encoding="utf-8",
    )
    done = ws.cli(
        "batch", str(program), "--inputs", str(items), "--key", "id", "--verify", str(verify), "--json"
    )
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert summary["counts"]["done"] == 1 and summary["counts"]["unverified"] == 1
    assert ws.item_states(summary["job_id"]) == {"ok": "done", "lost": "unverified"}


def test_a_verify_program_may_only_read(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace()
    verify = ws.program(
        'from servers.crm import add_note\nadd_note(customer_id="CUST-0001", text="sneaky")\nTrue\n', "v.py"
    )
    done = ws.cli(*batch_args(ws, 1, "ro", "--verify", str(verify), "--json"))
    assert json.loads(done.stdout)["counts"]["unverified"] == 1
    assert "sneaky" not in ws.crm_writes()


def test_bad_input_is_reported_with_its_line_and_the_rest_runs(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace()
    items = ws.root / "items.jsonl"
    items.write_text('{"id": "a", "customer": "CUST-0001"}\n{broken\n', encoding="utf-8")
    done = ws.cli("batch", str(ws.program()), "--inputs", str(items), "--key", "id", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["skipped_lines"] == [
        {"line": 2, "reason": json.loads(done.stdout)["skipped_lines"][0]["reason"]}
    ]
    strict = ws.cli("batch", str(ws.program()), "--inputs", str(items), "--key", "id", "--strict")
    assert strict.returncode == 2 and "input line 2" in strict.stderr
    unknown = ws.cli("batch", str(ws.program()), "--inputs", str(items), "--job-id", "nope", "--resume")
    assert unknown.returncode == 2 and "no job 'nope' to resume" in unknown.stderr


def test_a_failing_item_is_retried_up_to_max_attempts_in_the_same_run(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(crm_fault="fail_before_write")
    out = ws.root / "out.jsonl"
    done = ws.cli(*batch_args(ws, 2, "retries", "--max-attempts", "3", "--json", "--out", str(out)))
    assert done.returncode == 1
    assert json.loads(done.stdout)["counts"]["failed"] == 2
    assert [json.loads(line)["attempts"] for line in out.read_text().splitlines()] == [3, 3]
    assert ws.crm_writes() == [], "a refused write was never written"


def crm_processes(ws: Workspace) -> list[psutil.Process]:
    """The crm server processes serving this workspace (found by its state directory)."""
    state_dir = str(ws.root / "crm-state")
    found: list[psutil.Process] = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("CRM_STATE_DIR") == state_dir:
                found.append(proc)
    return found


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pool_containers(pool: str) -> set[str]:
    api = docker_api(10.0)
    try:
        return {container_id for container_id, _ in api.labelled(f"{POOL_LABEL}={pool}")}
    finally:
        api.close()


@pytest.mark.docker
def test_a_killed_docker_job_leaves_sandboxes_that_the_next_run_removes(
    make_workspace: MakeWorkspace, docker_image: str
) -> None:
    ws = make_workspace(crm_fault="slow=0.05", backend="docker")
    pool = ws.env["CODEMODE_POOL_ID"]
    process = ws.popen(*batch_args(ws, 40, "docker-kill", "--concurrency", "2"))
    some_done = lambda: sum(s == "done" for s in ws.item_states("docker-kill").values()) >= 5  # noqa: E731
    wait_for(some_done, 300, "a few items")
    servers = crm_processes(ws)
    assert servers, "the job's crm server is running"
    kill_group(process)
    left = pool_containers(pool)
    assert left, "SIGKILL gives the job no chance to remove its sandboxes"
    resumed = ws.cli(*batch_args(ws, 40, "docker-kill", "--resume", "--json"))
    summary = json.loads(resumed.stdout)
    assert summary["counts"]["failed"] == 0, resumed.stderr
    # The next run found the dead owner's containers and removed them (and its own at exit).
    assert not left & pool_containers(pool), "the killed run's sandboxes are gone"
    assert pool_containers(pool) == set()
    # The killed run's server lost its client; it is gone too, not an orphan.
    wait_for(
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in servers),
        30,
        "old server",
    )
