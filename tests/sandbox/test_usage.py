"""Each run reports what it used of its sandbox, measured by the host, on every backend.

Numbers are asserted against what the program was made to use (CPU seconds it burned by its own
clock, bytes it allocated or moved), never against the wall clock.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any, Literal

import pytest

from codemode.config import SandboxConfig
from codemode.sandbox import BackendName, Program, RunOutcome, RunUsage, SandboxManager
from codemode.sandbox._cgroup import probe_cgroups
from tests.sandbox.conftest import FakeHandler, StubTree

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MiB = 1024 * 1024
BUSY_ONE_CPU_SECOND = (
    "import time\nstop = time.process_time() + 1.0\nwhile time.process_time() < stop:\n    pass\n"
)
# Written byte by byte (a zeroed bytearray would be untouched pages that hold no memory).
HOLD_200_MB = "block = b'x' * (200 << 20)\nlen(block)"

Metering = Literal["cgroup", "procfs"]


METERED = pytest.mark.parametrize(
    ("backend", "metering"),
    [
        pytest.param("docker", "cgroup", marks=pytest.mark.docker),
        ("process", "cgroup"),
        ("process", "procfs"),
        pytest.param("bwrap", "cgroup", marks=pytest.mark.bwrap),
        pytest.param("bwrap", "procfs", marks=pytest.mark.bwrap),
    ],
    indirect=True,
)
"""Where each backend reads usage: a local backend from its sandbox's cgroup, or from /proc with
cgroups off (so that path is tested on hosts that have cgroups too); Docker always from its
container's cgroup."""


@pytest.fixture
def metering(request: pytest.FixtureRequest, backend: BackendName) -> Metering:
    metering: Metering = request.param
    if metering == "cgroup" and backend != "docker":
        host, why = probe_cgroups()
        if host is None:
            pytest.skip(f"this host cannot make cgroups: {why}")
    return metering


@pytest.fixture
def measured_config(
    make_config: Callable[..., SandboxConfig], metering: Metering
) -> Callable[..., SandboxConfig]:
    def make(**overrides: Any) -> SandboxConfig:
        return make_config(cgroups="auto" if metering == "cgroup" else "off", **overrides)

    return make


async def _run(
    config: SandboxConfig, code: str, binding: Any, stub_tree: StubTree, handler: FakeHandler
) -> RunOutcome:
    async with SandboxManager(config) as manager:
        return await manager.run(Program(code), binding=binding, modules=stub_tree, handler=handler)


def _usage(outcome: RunOutcome) -> RunUsage:
    assert outcome.usage is not None, outcome
    return outcome.usage


@METERED
async def test_a_busy_second_is_a_cpu_second_and_200_mb_held_is_a_200_mb_peak(
    measured_config: Callable[..., SandboxConfig],
    metering: Metering,
    stub_tree: StubTree,
    handler: FakeHandler,
    new_binding: Callable[..., Any],
) -> None:
    busy = await _run(measured_config(), BUSY_ONE_CPU_SECOND, new_binding(), stub_tree, handler)
    assert busy.status == "ok", busy.error
    used = _usage(busy)
    assert used.source == metering
    assert used.cpu_s is not None and used.cpu_s >= 0.8, used
    assert used.cap_hit is None

    held = await _run(measured_config(), HOLD_200_MB, new_binding(), stub_tree, handler)
    assert (held.status, held.result) == ("ok", 200 * MiB), held.error
    peak = _usage(held).peak_mb
    assert peak is not None and peak >= 200, _usage(held)


async def test_channel_bytes_count_what_the_run_moved_each_way(
    make_config: Callable[..., SandboxConfig],
    stub_tree: StubTree,
    handler: FakeHandler,
    new_binding: Callable[..., Any],
) -> None:
    # The 1 MiB argument goes out of the sandbox, and comes back in as the tool's result.
    code = "from servers.demo import echo\nreply = echo(text='q' * (1 << 20))\nlen(str(reply))"
    moved = await _run(make_config(), code, new_binding(), stub_tree, handler)
    assert moved.status == "ok", moved.error
    assert _usage(moved).channel_out_bytes >= MiB
    assert _usage(moved).channel_in_bytes >= MiB

    small = await _run(make_config(), "6 * 7", new_binding(), stub_tree, handler)
    assert small.status == "ok", small.error
    assert 0 < _usage(small).channel_in_bytes < 64 * 1024
    assert 0 < _usage(small).channel_out_bytes < 64 * 1024


@METERED
async def test_a_run_stopped_by_the_memory_cap_names_it(
    measured_config: Callable[..., SandboxConfig],
    stub_tree: StubTree,
    handler: FakeHandler,
    new_binding: Callable[..., Any],
) -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(b'x' * (8 << 20))\n"
    outcome = await _run(measured_config(memory_mb=128), code, new_binding(), stub_tree, handler)
    assert outcome.status == "error" and outcome.error is not None
    assert outcome.error.kind == "oom", outcome.error
    assert _usage(outcome).cap_hit == "memory"


async def test_a_run_stopped_by_the_wall_time_cap_names_it(
    make_config: Callable[..., SandboxConfig],
    stub_tree: StubTree,
    handler: FakeHandler,
    new_binding: Callable[..., Any],
) -> None:
    outcome = await _run(
        make_config(wall_time_s=1.0), "import time\ntime.sleep(30)", new_binding(), stub_tree, handler
    )
    assert outcome.error is not None and outcome.error.kind == "timeout"
    assert _usage(outcome).cap_hit == "wall_time"


@METERED
async def test_each_run_of_a_reused_sandbox_reports_its_own_usage(
    measured_config: Callable[..., SandboxConfig],
    stub_tree: StubTree,
    handler: FakeHandler,
    new_binding: Callable[..., Any],
) -> None:
    """A session's sandbox serves run after run: each reports its own CPU and peak, not the
    sandbox's totals so far."""
    async with (
        SandboxManager(measured_config(pool_size=1)) as manager,
        await manager.open_session(principal="alice", tenant="acme") as session,
    ):
        outcomes: list[RunOutcome] = []
        for code in (BUSY_ONE_CPU_SECOND + HOLD_200_MB + "\ndel block", "6 * 7"):
            outcome = await session.run(
                Program(code), binding=new_binding(), modules=stub_tree, handler=handler
            )
            assert outcome.status == "ok", outcome.error
            outcomes.append(outcome)
    first, second = (_usage(outcome) for outcome in outcomes)
    assert outcomes[0].sandbox_id == outcomes[1].sandbox_id
    assert first.cpu_s is not None and first.cpu_s >= 0.8, first
    assert first.peak_mb is not None and first.peak_mb >= 200, first
    # The second run's own CPU is a small part of the first's: it is not the sum of both.
    assert second.cpu_s is not None and second.cpu_s < first.cpu_s / 2, (first, second)
    # Its peak is its own too (the 200 MB were freed), or unknown where the counter cannot reset.
    assert second.peak_mb is None or second.peak_mb < 150, (first, second)


def _open_cgroup_files() -> list[str]:
    found: list[str] = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("/sys/fs/cgroup"):
                found.append(target)
    return found


@METERED
async def test_a_torn_down_sandbox_leaves_no_cgroup_file_open(
    measured_config: Callable[..., SandboxConfig],
    stub_tree: StubTree,
    handler: FakeHandler,
    new_binding: Callable[..., Any],
) -> None:
    """The meter holds its sandbox's counters open between runs: until the sandbox goes, not after."""
    before = _open_cgroup_files()
    async with SandboxManager(measured_config(pool_size=1)) as manager:
        for _ in range(2):
            outcome = await manager.run(
                Program("6 * 7"), binding=new_binding(), modules=stub_tree, handler=handler
            )
            assert outcome.status == "ok", outcome.error
    assert _open_cgroup_files() == before


FORK_PAST_THE_CAP = """
import os, signal, time
children = []
try:
    for _ in range(64):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
except OSError:
    pass
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
len(children)
"""


@pytest.mark.docker
async def test_a_run_refused_processes_by_the_pids_cap_names_it(
    docker_image: str, stub_tree: StubTree, handler: FakeHandler, new_binding: Callable[..., Any]
) -> None:
    """The container's pids cgroup refuses the forks and counts each refusal; the program carries
    on, and its run names the cap. (The local backends refuse them by RLIMIT_NPROC first, which
    leaves no count the host can read: there the cap is named only when the watchdog stops a
    run for its processes.)"""
    config = SandboxConfig(backend="docker", image=docker_image, pool_size=0, pids=16)
    outcome = await _run(config, FORK_PAST_THE_CAP, new_binding(), stub_tree, handler)
    assert outcome.status == "ok" and isinstance(outcome.result, int) and outcome.result < 64, outcome.error
    assert _usage(outcome).cap_hit == "pids", _usage(outcome)
