"""``codemode batch --engine ray`` on a real 2-node Ray cluster with a PostgreSQL ledger.

The figure that matters is the crm server's own write log: after a worker killed mid-job, a
driver killed mid-job and a resume, the server committed exactly one write per item.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

import psutil

from tests.batch.conftest import Workspace
from tests.batch.test_batch_e2e import kill_group, settle_unknown_notes, wait_for

from .conftest import MakeCluster, MakeRayWorkspace, RayCluster

DRIFTING = "tests/fixtures/servers/drifting_server.py"


def ray_batch(ws: Workspace, cluster: RayCluster, count: int, job: str, *extra: str) -> list[str]:
    return [
        *("batch", str(ws.program()), "--inputs", str(ws.items(count)), "--key", "id", "--job-id", job),
        *("--engine", "ray", "--ray-address", cluster.address, "--concurrency", "4", *extra),
    ]


def done_count(ws: Workspace, job: str) -> Callable[[], int]:
    return lambda: sum(s == "done" for s in ws.item_states(job).values())


def batch_actors() -> list[psutil.Process]:
    found: list[psutil.Process] = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if cmdline.startswith("ray::BatchActor"):
            found.append(process)
    return found


def drifting_server(env: str) -> str:
    """The drifting test server's config section, with ``env`` as its environment (TOML)."""
    command = f'command = "{sys.executable}"\nargs = ["{os.path.abspath(DRIFTING)}"]\n'
    return f"[servers.drifting]\n{command}env = {{ {env} }}\n"


def test_the_cluster_lives_on_loopback_only(make_cluster: MakeCluster) -> None:
    assert [name for _, name in socket.if_nameindex()] == ["lo"], "only lo in this namespace"
    cluster = make_cluster()
    assert cluster.node_addresses() == ["127.0.0.1", "127.0.0.1"]


def test_300_items_on_two_nodes_survive_a_killed_worker_and_a_killed_driver(
    make_cluster: MakeCluster, make_ray_workspace: MakeRayWorkspace
) -> None:
    cluster = make_cluster()
    ws = make_ray_workspace()
    job = "ray-300"
    driver = ws.popen(*ray_batch(ws, cluster, 300, job))
    done = done_count(ws, job)
    wait_for(lambda: done() >= 40, 600, "40 items done")
    actors = batch_actors()
    assert len(actors) == 4, f"one actor per worker slot, found {len(actors)}"
    assert len({actor.ppid() for actor in actors}) == 2, "the actors are spread over both nodes' raylets"
    os.kill(actors[0].pid, signal.SIGKILL)  # one node's worker, mid-job
    wait_for(lambda: done() >= 150, 600, "150 items done after the worker was killed")
    kill_group(driver)  # and now the driver
    stopped = done()
    assert 150 <= stopped < 300, "killed mid-job"
    resumed = ws.cli(*ray_batch(ws, cluster, 300, job, "--resume", "--json"))
    summary = json.loads(resumed.stdout)
    assert summary["resumed"] and summary["counts"]["failed"] == 0, resumed.stderr
    # Calls in flight at either kill are unknown: settle them from the server's own records,
    # then run just those items again.
    settle_unknown_notes(ws)
    out = ws.root / "out.jsonl"
    final = ws.cli(*ray_batch(ws, cluster, 300, job, "--retry-unknown", "--json", "--out", str(out)))
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout)["counts"]["done"] == 300
    writes = ws.crm_writes()
    assert len(writes) == 300, f"{len(writes)} writes for 300 items"
    assert len(set(writes)) == 300, "no note was written twice"
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 300 and {line["status"] for line in lines} == {"done"}
    verify = ws.cli("ledger", "verify", "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_node_whose_tools_drifted_refuses_to_run_items(
    make_cluster: MakeCluster, make_ray_workspace: MakeRayWorkspace
) -> None:
    # The driver pinned the base tools; the second node's server lists a changed 'echo'.
    server = drifting_server('FIXTURE_VARIANT = "${NODE_VARIANT}"')
    ws = make_ray_workspace(servers=server, sync_env={"NODE_VARIANT": "base"})
    os.environ["NODE_VARIANT"] = "base"
    cluster = make_cluster(extra_node_env={"NODE_VARIANT": "description"})
    run = ws.cli(*ray_batch(ws, cluster, 10, "drift", "--concurrency", "4"))
    assert run.returncode == 2, run.stdout + run.stderr
    assert "refuses to run items" in run.stderr and "drifting/echo (changed)" in run.stderr
    assert "ray node" in run.stderr, "the message names the node"
    assert ws.crm_writes() == [], "no item ran"


def test_a_secret_missing_on_the_nodes_is_a_clear_error_naming_the_node(
    make_cluster: MakeCluster, make_ray_workspace: MakeRayWorkspace
) -> None:
    server = drifting_server('TOKEN = "${ONLY_ON_THE_DRIVER}"')
    ws = make_ray_workspace(servers=server, sync_env={"ONLY_ON_THE_DRIVER": "s3cr3t-value"})
    cluster = make_cluster()
    started = time.monotonic()
    run = ws.cli(*ray_batch(ws, cluster, 10, "secret"))
    assert run.returncode == 2, run.stdout + run.stderr
    assert "ONLY_ON_THE_DRIVER" in run.stderr and "ray node" in run.stderr
    assert "s3cr3t-value" not in run.stderr + run.stdout
    assert time.monotonic() - started < 300
    assert ws.crm_writes() == []
