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

pytestmark = pytest.mark.integration

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


# -- memory that is not resident --------------------------------------------------------------
# Each holder keeps HELD bytes of shared memory in a way that leaves little or nothing resident in
# its own RSS, then says "ready" and waits; the sample must count the memory once.

HELD = 48 << 20

HOLDERS = {
    # A memfd written through its descriptor, never mapped.
    "memfd held by its descriptor": f"""
import os
fd = os.memfd_create("held")
os.write(fd, bytes({HELD}))
""",
    # A memfd whose descriptor is closed: only a one-page mapping keeps the whole file alive.
    "memfd held by a small mapping": f"""
import mmap, os
fd = os.memfd_create("held")
os.write(fd, bytes({HELD}))
view = mmap.mmap(fd, mmap.PAGESIZE)
os.close(fd)
""",
    # Shared anonymous memory touched only by a child that has exited: in nobody's RSS now.
    "shared anonymous memory touched by an exited child": f"""
import mmap, os
area = mmap.mmap(-1, {HELD})
child = os.fork()
if child == 0:
    area.write(b"x" * {HELD})
    os._exit(0)
os.waitpid(child, 0)
""",
    # One memfd, mapped and touched, held by two processes: counted once, not once per holder
    # nor again as their resident shared pages.
    "memfd shared by two processes": f"""
import mmap, os, time
fd = os.memfd_create("held")
os.ftruncate(fd, {HELD})
area = mmap.mmap(fd, {HELD})
area.write(b"x" * {HELD})
if os.fork() == 0:
    time.sleep(120)
""",
}


@pytest.mark.parametrize("holder", sorted(HOLDERS))
def test_shared_memory_that_is_not_resident_is_counted_once(holder: str) -> None:
    if holder == "memfd held by a small mapping" and os.geteuid() != 0:
        pytest.skip("only root can size a mapped file through /proc/PID/map_files (documented)")
    script = HOLDERS[holder] + '\nimport time\nprint("ready", flush=True)\ntime.sleep(120)\n'
    leader = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert leader.stdout is not None and leader.stdout.readline().strip() == "ready"
        found = sample(Members(leader=leader.pid))
        assert HELD <= found.shared < HELD + (4 << 20), found
        assert found.rss < HELD, found  # the shared pages are not counted again as resident
        assert found.memory == found.rss + found.shared + found.tmpfs
        assert kill_members(Members(leader=leader.pid))
    finally:
        leader.kill()
        leader.wait(timeout=10)
