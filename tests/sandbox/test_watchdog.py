"""Finding and killing a sandbox's processes by process tree and session (a host that is not root)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from codemode.sandbox import _watchdog as watchdog
from codemode.sandbox._watchdog import Members, kill_members, sample

# A leader in its own session that starts a child and a grandchild that leaves the tree by a
# double fork (its parent exits, so it is re-parented): only the session still ties it in.
TREE = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
if os.fork() == 0:
    if os.fork() == 0:
        time.sleep(120)
    os._exit(0)
print("ready", flush=True)
time.sleep(120)
"""


def test_the_tree_and_its_session_are_found_and_killed_without_a_private_uid() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert leader.stdout is not None and leader.stdout.readline().strip() == "ready"
        members = Members(leader=leader.pid)
        deadline = time.monotonic() + 10
        while len(sample(members).pids) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # the child may still be starting
        found = sample(members)
        assert leader.pid in found.pids
        assert len(found.pids) >= 3, found  # leader, child, and the double-forked grandchild
        assert found.rss > 0
        strays = [psutil.Process(pid) for pid in found.pids]
        assert kill_members(members)
        assert sample(members).pids == ()
        for proc in strays:
            assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    finally:
        leader.kill()
        leader.wait(timeout=10)


def test_a_process_that_exits_between_the_scan_and_the_sample_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exited = subprocess.Popen(["true"])
    exited.wait()  # reaped: its pid names no process now

    def scanned(uid: int) -> list[int]:
        return [exited.pid, os.getpid()]

    monkeypatch.setattr(watchdog, "_pids_of_uid", scanned)
    found = sample(Members(leader=os.getpid(), uid=12345))
    assert found.pids == (os.getpid(),)
