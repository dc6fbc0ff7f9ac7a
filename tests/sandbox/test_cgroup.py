"""One cgroup per local sandbox: where it goes on each cgroup layout, what it enforces, cleanup,
and what ``sandbox doctor`` says about memory enforcement."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode.config import BackendChoice, SandboxConfig
from codemode.errors import SandboxError
from codemode.sandbox import SandboxManager, doctor
from codemode.sandbox._backend import Launch
from codemode.sandbox._cgroup import (
    Candidate,
    CgroupHost,
    SandboxCgroup,
    cgroup_of_process,
    locate,
    probe_cgroups,
)
from codemode.sandbox._linux import ChildPlan
from codemode.sandbox._process import ProcessBackend
from codemode.sandbox._state import StateDir

MiB = 1024 * 1024

# -- where sandbox cgroups go (pure: mountinfo and /proc/self/cgroup as text) -------------------

V1_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_SELF = "8:pids:/\n4:memory:/jobs/42\n0::/\n"

V2_MOUNTS = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V2_SELF = "0::/system.slice/codemode.service\n"


def test_v1_sandboxes_go_under_this_process_s_own_memory_and_pids_cgroups() -> None:
    assert locate(V1_MOUNTS, V1_SELF) == [
        Candidate(1, Path("/sys/fs/cgroup/memory/jobs/42"), Path("/sys/fs/cgroup/pids"))
    ]


def test_v1_sandboxes_count_cpu_time_under_this_process_s_cpuacct_cgroup_where_mounted() -> None:
    mounts = (
        V1_MOUNTS + "37 31 0:34 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    )
    [candidate] = locate(mounts, V1_SELF + "5:cpu,cpuacct:/jobs/42\n")
    assert candidate.cpuacct_parent == Path("/sys/fs/cgroup/cpu,cpuacct/jobs/42")
    assert locate(V1_MOUNTS, V1_SELF)[0].cpuacct_parent is None


def test_v1_without_a_pids_hierarchy_still_gets_memory() -> None:
    mounts = "\n".join(line for line in V1_MOUNTS.splitlines() if "pids" not in line)
    assert locate(mounts, V1_SELF) == [Candidate(1, Path("/sys/fs/cgroup/memory/jobs/42"))]


def test_v2_tries_our_own_cgroup_then_the_root_then_our_parent() -> None:
    assert [c.memory_parent for c in locate(V2_MOUNTS, V2_SELF)] == [
        Path("/sys/fs/cgroup/system.slice/codemode.service"),
        Path("/sys/fs/cgroup"),
        Path("/sys/fs/cgroup/system.slice"),
    ]
    # In the root cgroup (a container's namespace root), there is one place to try.
    assert [c.memory_parent for c in locate(V2_MOUNTS, "0::/\n")] == [Path("/sys/fs/cgroup")]


def test_a_mount_of_part_of_the_hierarchy_is_resolved_or_refused() -> None:
    # Mounted from /jobs: our cgroup /jobs/42 is at <mount>/42; one outside /jobs cannot be reached.
    mounts = "35 31 0:32 /jobs /mnt/memory\\040cg rw - cgroup cgroup rw,memory\n"
    assert locate(mounts, "4:memory:/jobs/42\n") == [Candidate(1, Path("/mnt/memory cg/42"))]
    assert locate(mounts, "4:memory:/other\n") == []


def test_no_memory_controller_means_no_candidate() -> None:
    hybrid_without_memory = "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    assert locate(hybrid_without_memory, "0::/\n") == [Candidate(2, Path("/sys/fs/cgroup/unified"))]
    assert locate("", "0::/\n") == []
    assert locate(V1_MOUNTS, "0::/\n") == []  # memory is on v1, but we are in no memory cgroup


# -- real cgroups (where this host can make them) -----------------------------------------------


@pytest.fixture
def cgroups() -> CgroupHost:
    host, why = probe_cgroups()
    if host is None:
        pytest.skip(f"this host cannot make cgroups: {why}")
    return host


@pytest.fixture
def cgroup_name() -> Iterator[str]:
    name = f"test-{os.getpid()}-{os.urandom(4).hex()}"
    yield name
    host, _ = probe_cgroups()
    if host is not None:  # what a failed test left, with its processes
        left = tuple(parent / name for parent in host.parents if (parent / name).is_dir())
        if left:
            SandboxCgroup(host.version, left).remove()


def join_from_child(cgroup: SandboxCgroup) -> Callable[[], None]:
    """A ``preexec_fn`` that moves the child into ``cgroup`` (as a sandbox moves itself)."""

    def join() -> None:
        for path in cgroup.procs_files:
            with open(path, "w", encoding="ascii") as handle:
                handle.write("0")

    return join


def test_the_cgroup_of_a_process_is_found_only_under_the_name_it_must_have() -> None:
    """How a container's counters are found from the pid its engine reports: a pid that the
    engine sees in another pid namespace names some other process here, never its cgroup."""
    assert cgroup_of_process(os.getpid(), "no-container-of-this-name") is None
    assert cgroup_of_process(2**22 + 1, "any") is None  # no such process


@pytest.mark.integration
def test_the_probe_leaves_nothing_behind(cgroups: CgroupHost) -> None:
    for parent in cgroups.parents:
        assert not parent.exists() or not [p for p in parent.iterdir() if p.name.startswith("probe-")]


@pytest.mark.integration
def test_a_process_in_a_sandbox_cgroup_is_oom_killed_at_its_limit_and_the_cgroup_removed(
    cgroups: CgroupHost, cgroup_name: str
) -> None:
    cgroup = cgroups.create(cgroup_name, 64 * MiB, 16)
    pids_dir = cgroup.dirs[0] if cgroups.version == 2 else cgroup.pids_dir
    if pids_dir is not None:
        assert (pids_dir / "pids.max").read_text().strip() == "16"
    # Memory a memfd holds is not resident in the process, but the cgroup is charged for it.
    script = "import os\nfd = os.memfd_create('x')\nfor _ in range(256):\n    os.write(fd, bytes(1 << 20))\n"

    child = subprocess.run(
        [sys.executable, "-c", script], preexec_fn=join_from_child(cgroup), check=False, timeout=60
    )
    assert child.returncode == -9  # SIGKILL from the kernel's OOM killer
    assert cgroup.oom_kills() == 1
    assert cgroup.pids() == []
    assert cgroup.remove()
    assert not any(directory.exists() for directory in cgroup.dirs)


@pytest.mark.integration
def test_remove_kills_what_is_left_in_the_cgroup(cgroups: CgroupHost, cgroup_name: str) -> None:
    cgroup = cgroups.create(cgroup_name, 64 * MiB, 16)

    sleeper = subprocess.Popen(["sleep", "120"], preexec_fn=join_from_child(cgroup))
    try:
        assert cgroup.pids() == [sleeper.pid]
        assert cgroup.remove()
        assert sleeper.wait(timeout=10) == -9
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.integration
def test_sandboxes_made_and_removed_at_once_never_trip_over_the_shared_parent(cgroups: CgroupHost) -> None:
    # The shared `codemode` directory goes when its last sandbox does, so one thread's teardown
    # removes it while another is making its sandbox there (a warm pool refills while used
    # sandboxes go): every make must still succeed. Before the fix, `mkdir(exist_ok=True)` on the
    # directory being removed raised FileExistsError and the pool could start no sandbox.
    from concurrent.futures import ThreadPoolExecutor

    prefix = f"churn-{os.getpid()}-{os.urandom(3).hex()}"

    def churn(worker: int) -> int:
        made = 0
        for round_ in range(25):
            cgroup = cgroups.create(f"{prefix}-{worker}-{round_}", 64 * MiB, 16)
            made += 1
            assert cgroup.remove()
        return made

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert sum(pool.map(churn, range(6))) == 150
    for parent in cgroups.parents:
        assert not parent.exists() or not [p for p in parent.iterdir() if p.name.startswith(prefix)]


# -- what doctor says -----------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.anyio
async def test_doctor_says_which_memory_enforcement_each_local_backend_has() -> None:
    off = await doctor(SandboxConfig(backend="process", cgroups="off"))
    checks = {check.name: check for check in off.checks}
    memory = checks["process: memory limit"]
    assert (memory.status, memory.detail.split(":")[0]) == ("warn", "watchdog")
    assert 'cgroups = "off" in [sandbox]' in memory.detail
    assert memory.fix
    assert "memory watchdog, no cgroup" in checks["in force"].detail

    host, _ = probe_cgroups()
    auto = await doctor(SandboxConfig(backend="process"))
    checks = {check.name: check for check in auto.checks}
    memory = checks["process: memory limit"]
    if host is None or os.geteuid() != 0:
        assert memory.status == "warn"
    else:
        assert (memory.status, memory.detail.split(":")[0]) == ("ok", f"cgroup v{host.version}")
        assert f"a cgroup v{host.version} per sandbox" in checks["in force"].detail
    if "bwrap: memory limit" in checks:  # bubblewrap is installed
        expected = "watchdog" if host is None else f"cgroup v{host.version}"
        mode, _, described = checks["bwrap: memory limit"].detail.partition(": ")
        assert mode == expected
        assert described in checks["bwrap: enforces"].detail


# -- a host that dies --------------------------------------------------------------------------

CRASHING_HOST = """
import os, sys
import anyio
from codemode.config import BackendChoice, SandboxConfig
from codemode.sandbox import SandboxManager

async def main():
    async with SandboxManager(SandboxConfig(backend=sys.argv[1], pool_size=2)) as manager:
        await manager.wait_ready()
        print("ready", os.getpid(), flush=True)
        os._exit(9)  # a host that dies without cleaning up

anyio.run(main)
"""


@pytest.mark.integration
@pytest.mark.anyio
async def test_the_cgroups_of_a_crashed_host_s_sandboxes_are_removed_by_the_next_host(
    cgroups: CgroupHost,
    local_backend: BackendChoice,
    tmp_path: Path,
    leftovers: Any,
    no_leftovers: Callable[[], None],
) -> None:
    script = tmp_path / "crashing_host.py"
    script.write_text(CRASHING_HOST)
    crashed = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, str(script), local_backend], capture_output=True, text=True, timeout=120
        )
    )
    assert crashed.returncode == 9, crashed.stderr
    pid = int(crashed.stdout.split()[1])
    # Each sandbox recorded its cgroup where any later host finds it (on v1 the cgroup is under
    # the crashed host's own, where another host would not look).
    roots: list[Path] = leftovers.dirs_of(pid)
    recorded = [SandboxCgroup.recorded(StateDir.read_meta(root) or {}, root.name) for root in roots]
    assert recorded and all(cgroup is not None for cgroup in recorded)
    dirs = [directory for cgroup in recorded if cgroup is not None for directory in cgroup.dirs]
    assert all(directory.is_dir() for directory in dirs)
    async with SandboxManager(SandboxConfig(backend=local_backend, pool_size=0)):
        assert leftovers.dirs_of(pid) == []
        assert not any(directory.exists() for directory in dirs)
    no_leftovers()


def test_a_recorded_cgroup_must_be_a_sandbox_cgroup_of_that_name() -> None:
    path = "/sys/fs/cgroup/memory/codemode/abc"
    good: dict[str, object] = {"cgroup_version": 1, "cgroup_dirs": [path]}
    assert SandboxCgroup.recorded(good, "abc") == SandboxCgroup(1, (Path(path),))
    bad: list[dict[str, object]] = [
        {},
        {"cgroup_version": 3, "cgroup_dirs": [path]},
        {"cgroup_version": 1, "cgroup_dirs": []},
        {"cgroup_version": 1, "cgroup_dirs": ["/sys/fs/cgroup/memory/codemode/other"]},
        {"cgroup_version": 1, "cgroup_dirs": ["/sys/fs/cgroup/memory/abc"]},  # not in a codemode dir
        {"cgroup_version": 1, "cgroup_dirs": ["codemode/abc"]},
        {"cgroup_version": 1, "cgroup_dirs": path},
    ]
    for meta in bad:
        assert SandboxCgroup.recorded(meta, "abc") is None, meta


@pytest.mark.integration
@pytest.mark.anyio
@pytest.mark.parametrize("failure", [OSError(24, "Too many open files"), RuntimeError("unexpected")])
async def test_a_sandbox_that_fails_to_start_leaves_no_cgroup(
    cgroups: CgroupHost, failure: BaseException, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("a process sandbox gets a cgroup only on a root host")
    made: list[SandboxCgroup] = []
    create = CgroupHost.create

    def recording(self: CgroupHost, name: str, memory_bytes: int, pids: int) -> SandboxCgroup:
        made.append(create(self, name, memory_bytes, pids))
        return made[-1]

    def failing(self: ProcessBackend, launch: Launch, plan: ChildPlan) -> Any:
        raise failure

    backend = ProcessBackend(SandboxConfig(backend="process", pool_size=0), StateDir(tmp_path / "state"))
    await backend.prepare()
    monkeypatch.setattr(CgroupHost, "create", recording)
    monkeypatch.setattr(ProcessBackend, "_popen", failing)
    with pytest.raises((SandboxError, RuntimeError)):
        await backend.spawn(backend.new_launch())
    assert len(made) == 1
    assert not any(directory.exists() for directory in made[0].dirs)
