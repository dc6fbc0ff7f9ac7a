"""Hostile programs are contained, on every backend, and nothing is left running afterwards."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import psutil
import pytest

from codemode.config import BackendChoice, SandboxConfig
from codemode.sandbox import Program, SandboxManager
from codemode.sandbox._cgroup import probe_cgroups
from tests.sandbox.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MiB = 1024 * 1024

Enforcement = Literal["cgroup", "watchdog"]


@pytest.fixture(params=["cgroup", "watchdog"])
def enforcement(request: pytest.FixtureRequest) -> Enforcement:
    """How the local backends enforce memory: a cgroup per sandbox (skipped where this host cannot
    make one), or the watchdog, with cgroups off (so it is tested on hosts that have cgroups too)."""
    if request.param == "cgroup":
        host, why = probe_cgroups()
        if host is None:
            pytest.skip(f"this host cannot make cgroups: {why}")
        return "cgroup"
    return "watchdog"


def cgroups_setting(enforcement: Enforcement) -> Literal["auto", "off"]:
    return "auto" if enforcement == "cgroup" else "off"


async def test_memory_bomb_ends_with_a_clear_out_of_memory_error(
    run_program: Callable[..., Any], no_leftovers: Callable[[], None]
) -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(b'x' * (8 << 20))\n"
    outcome = await run_program(code, memory_mb=128)
    assert outcome.status == "error"
    assert outcome.error.kind == "oom", outcome.error
    assert "out of memory" in outcome.error.message
    assert "128 MiB" in outcome.error.message
    no_leftovers()


async def test_fork_bomb_is_contained_and_the_host_keeps_working(
    run_program: Callable[..., Any], no_leftovers: Callable[[], None]
) -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    outcome = await run_program(code, pids=32, wall_time_s=3.0)
    assert outcome.status == "error"
    assert outcome.error.kind in ("timeout", "killed"), outcome.error
    no_leftovers()
    after = await run_program("6 * 7")
    assert (after.status, after.result) == ("ok", 42)
    no_leftovers()


async def test_cpu_spin_is_killed_at_the_wall_time_limit_with_partial_output(
    run_program: Callable[..., Any], no_leftovers: Callable[[], None]
) -> None:
    code = "print('spinning', flush=True)\nwhile True:\n    pass\n"
    outcome = await run_program(code, wall_time_s=2.0)
    assert outcome.status == "error"
    assert outcome.error.kind == "timeout"
    assert "wall-time limit of 2 s" in outcome.error.message
    assert 2000 <= outcome.duration_ms < 8000
    assert outcome.stdout == "spinning\n"
    no_leftovers()


async def test_hundred_megabytes_of_output_are_truncated_with_a_flag_and_host_memory_stays_flat(
    run_program: Callable[..., Any], no_leftovers: Callable[[], None]
) -> None:
    code = (
        "import os, sys\n"
        "chunk = 'x' * (1 << 20)\n"
        "for _ in range(50):\n    sys.stdout.write(chunk)\n"
        "raw = b'y' * (1 << 20)\n"
        "for _ in range(50):\n    os.write(1, raw)\n"
        "for _ in range(20):\n    os.write(2, raw)\n"
        "'done'\n"
    )
    host = psutil.Process()
    before = host.memory_info().rss
    outcome = await run_program(code, output_bytes=65536)
    grown = host.memory_info().rss - before
    assert outcome.status == "ok", outcome.error
    assert outcome.result == "done"
    assert outcome.stdout_truncated
    assert outcome.stderr_truncated
    assert len(outcome.stdout.encode()) == 65536
    assert set(outcome.stdout) == {"x"}
    assert len(outcome.stderr.encode()) == 65536
    assert grown < 50 * MiB, f"host RSS grew by {grown // MiB} MiB"
    no_leftovers()


async def test_filling_the_disk_fails_inside_the_sandbox(
    run_program: Callable[..., Any], no_leftovers: Callable[[], None]
) -> None:
    code = "with open('/tmp/fill', 'wb') as f:\n    while True:\n        f.write(b'0' * (1 << 20))\n"
    outcome = await run_program(code, tmpfs_mb=16)
    assert outcome.status == "error"
    assert outcome.error.kind == "exception"
    assert outcome.error.type == "OSError", outcome.error
    # The root filesystem and the host's shared scratch directories are not writable either.
    probe = (
        "import os\n"
        "failed = []\n"
        "for path in ('/fill', '/var/tmp/codemode-fill', '/usr/fill'):\n"
        "    try:\n"
        "        with open(path, 'wb') as f:\n"
        "            f.write(b'0' * (32 << 20))\n"
        "    except OSError:\n"
        "        failed.append(path)\n"
        "failed\n"
    )
    outcome = await run_program(probe, tmpfs_mb=16)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == ["/fill", "/var/tmp/codemode-fill", "/usr/fill"]
    assert not os.path.exists("/var/tmp/codemode-fill")  # noqa: ASYNC240 - one stat call
    no_leftovers()


@pytest.fixture
def host_listener() -> Iterator[socket.socket]:
    """A TCP listener on the host's 127.0.0.1 that the sandbox must not reach."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    try:
        yield listener
    finally:
        listener.close()


async def test_network_connections_fail(
    run_program: Callable[..., Any], host_listener: socket.socket, no_leftovers: Callable[[], None]
) -> None:
    port = host_listener.getsockname()[1]
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        "    result = 'connected'\n"
        "except OSError as exc:\n"
        "    result = type(exc).__name__\n"
        "result\n"
    )
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result != "connected"
    with pytest.raises(BlockingIOError):
        host_listener.accept()  # nothing ever arrived
    no_leftovers()


@pytest.fixture
def private_host_file() -> Iterator[Path]:
    """A 0600 file outside /tmp (so the process backend's private /tmp does not hide it)."""
    directory = Path("/run") / f"codemode-test-{secrets.token_hex(4)}" if os.geteuid() == 0 else None
    if directory is None:
        pytest.skip("needs root to place a file outside the sandbox's private tmp")
    directory.mkdir(mode=0o755)
    path = directory / "credentials"
    path.write_text("top-secret-credential")
    path.chmod(0o600)
    try:
        yield path
    finally:
        shutil.rmtree(directory)


async def test_no_host_environment_file_or_credential_is_visible(
    run_program: Callable[..., Any],
    private_host_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_leftovers: Callable[[], None],
) -> None:
    marker = f"marker-{secrets.token_hex(8)}"
    monkeypatch.setenv("CODEMODE_TEST_MARKER", marker)
    code = (
        "import os, socket\n"
        "seen = {'env': dict(os.environ)}\n"
        "for name in ('/proc/self/environ', '/proc/1/environ'):\n"
        "    try:\n"
        "        seen[name] = open(name, 'rb').read().decode(errors='replace')\n"
        "    except OSError as exc:\n"
        "        seen[name] = type(exc).__name__\n"
        f"for name in ({str(private_host_file)!r}, '/root/.docker/config.json', '/etc/shadow'):\n"
        "    try:\n"
        "        seen[name] = open(name).read()\n"
        "    except OSError as exc:\n"
        "        seen[name] = type(exc).__name__\n"
        "try:\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    s.connect('/var/run/docker.sock')\n"
        "    seen['docker.sock'] = 'connected'\n"
        "except OSError as exc:\n"
        "    seen['docker.sock'] = type(exc).__name__\n"
        "seen['secret files'] = [n for n in os.listdir('/run/codemode') if 'secret' in n] "
        "if os.path.isdir('/run/codemode') and os.access('/run/codemode', os.R_OK) else []\n"
        "seen['uid'] = os.getuid()\n"
        "seen\n"
    )
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    seen = outcome.result
    text = repr(seen)
    assert marker not in text
    assert "top-secret-credential" not in text
    assert not any(key.startswith("CODEMODE_") for key in seen["env"])
    assert seen[str(private_host_file)] in ("PermissionError", "FileNotFoundError")
    assert seen["/root/.docker/config.json"] in ("PermissionError", "FileNotFoundError")
    assert seen["/etc/shadow"] in ("PermissionError", "FileNotFoundError")
    assert seen["docker.sock"] != "connected"
    assert seen["secret files"] == []
    assert seen["uid"] != 0
    no_leftovers()


async def test_a_setuid_binary_cannot_change_the_programs_uid(run_program: Callable[..., Any]) -> None:
    code = (
        "lines = open('/proc/self/status').read().splitlines()\n"
        "[line.split(':', 1)[1].strip() for line in lines if line.startswith('NoNewPrivs:')][0]\n"
    )
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == "1"


async def test_memory_limit_kills_when_processes_together_exceed_it(
    local_backend: BackendChoice,
    enforcement: Enforcement,
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    # Each process stays under RLIMIT_AS (per process); only the sum is over the limit.
    code = (
        "import os, time\n"
        "for _ in range(4):\n"
        "    if os.fork() == 0:\n"
        "        hold = b'x' * (48 << 20)\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "time.sleep(30)\n"
    )
    config = SandboxConfig(
        backend=local_backend,
        pool_size=0,
        memory_mb=128,
        wall_time_s=20,
        cgroups=cgroups_setting(enforcement),
    )
    async with SandboxManager(config) as manager:
        outcome = await manager.run(Program(code), binding=new_binding(), modules=stub_tree, handler=handler)
    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.kind == "oom", outcome.error
    assert "limit of 128 MiB" in outcome.error.message
    killer = "the kernel" if enforcement == "cgroup" else "the watchdog"
    assert outcome.error.message.endswith(f"{killer} killed it"), outcome.error
    assert outcome.duration_ms < 10_000
    no_leftovers()


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="only a root host gives the sandbox its own uid; without it, setsid + double fork leaves "
    "the watchdog's view (documented)",
)
async def test_watchdog_counts_processes_that_left_the_tree_and_the_session(
    local_backend: BackendChoice,
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    # Each holder is re-parented away from the runtime and in a session of its own: only the
    # sandbox's uid still ties it to the sandbox, so a scan of the tree or session would miss it.
    code = (
        "import os, time\n"
        "for _ in range(4):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            hold = b'x' * (48 << 20)\n"
        "            time.sleep(30)\n"
        "        os._exit(0)\n"
        "time.sleep(30)\n"
    )
    # The watchdog's own way to find processes is tested here (a cgroup holds them regardless).
    config = SandboxConfig(backend=local_backend, pool_size=0, memory_mb=128, wall_time_s=20, cgroups="off")
    async with SandboxManager(config) as manager:
        outcome = await manager.run(Program(code), binding=new_binding(), modules=stub_tree, handler=handler)
    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.kind == "oom", outcome.error
    assert "over the limit of 128 MiB" in outcome.error.message
    no_leftovers()


# -- memory that is not resident (issue 36, unsafe class 5) -----------------------------------
# Each program keeps far more than its limit in memory that no process has resident: memfds
# written but never mapped, or a file in /dev/shm (a tmpfs). It then waits, so a run that is not
# stopped for memory ends at the wall-time limit instead.

LIMIT_MB = 384
HELD_MB = 768
"""What each program tries to hold: twice its limit."""

PROGRAMS = {
    # 48 memfds of 16 MiB each, written through their descriptors and never mapped.
    "memfd": (
        "import os, time\n"
        "chunk = bytes(1 << 20)\n"
        "held = []\n"
        f"for i in range({HELD_MB // 16}):\n"
        "    fd = os.memfd_create(f'hold{i}')\n"
        "    for _ in range(16):\n"
        "        os.write(fd, chunk)\n"
        "    held.append(fd)\n"
        "time.sleep(60)\n"
    ),
    # One file in /dev/shm, closed once written: only the tmpfs holds it.
    "dev_shm": (
        "import time\n"
        "chunk = bytes(1 << 20)\n"
        "with open('/dev/shm/hold', 'wb') as f:\n"
        f"    for _ in range({HELD_MB}):\n"
        "        f.write(chunk)\n"
        "time.sleep(60)\n"
    ),
}


def shmem_bytes() -> int:
    """The host's shared memory in use (memfds and tmpfs files included), from /proc/meminfo."""
    with open("/proc/meminfo", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


@pytest.mark.parametrize("program", sorted(PROGRAMS))
async def test_memory_that_is_not_resident_stops_the_run_at_the_limit_and_is_released(
    local_backend: BackendChoice,
    enforcement: Enforcement,
    program: str,
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    config = SandboxConfig(
        backend=local_backend,
        pool_size=0,
        memory_mb=LIMIT_MB,
        tmpfs_mb=2 * HELD_MB,  # room for the whole file: only the memory limit may stop it
        wall_time_s=30,
        cgroups=cgroups_setting(enforcement),
    )
    before = shmem_bytes()
    async with SandboxManager(config) as manager:
        isolation = manager.backend.isolation
        code = PROGRAMS[program]
        outcome = await manager.run(Program(code), binding=new_binding(), modules=stub_tree, handler=handler)
    assert outcome.status == "error", outcome
    assert outcome.error is not None
    assert (outcome.error.kind, outcome.error.type) == ("oom", "OutOfMemory"), outcome.error
    message = outcome.error.message
    assert message.startswith("the program ran out of memory")
    assert f"limit of {LIMIT_MB} MiB" in message
    if enforcement == "cgroup":
        assert re.search(r"\(cgroup v[12] memory\.(max|limit_in_bytes),", message), message
        assert message.endswith("the kernel killed it")
    else:
        assert message.endswith("the watchdog killed it"), message
        held = re.search(r"(\d+) MiB in memfds and shared memory, (\d+) MiB in tmpfs files", message)
        assert held is not None, message
        memfds, tmpfs = int(held[1]), int(held[2])
        # The watchdog says where the memory was: the kind of memory the program held is over
        # what the rest of the limit leaves for it.
        assert (memfds if program == "memfd" else tmpfs) > LIMIT_MB // 2, message

    if enforcement == "cgroup":
        assert "kernel memory limit: a cgroup v" in isolation
    else:
        assert "memory watchdog, no cgroup" in isolation

    no_leftovers()
    # Everything the program held is released with its sandbox (memfds with their processes, the
    # tmpfs with its mount namespace). Other processes may add a little shared memory meanwhile.
    wait_until(
        lambda: shmem_bytes() < before + LIMIT_MB * MiB // 4,
        what=f"host shared memory back near {before // MiB} MiB (now {shmem_bytes() // MiB} MiB)",
    )
    if enforcement == "cgroup":
        host, _ = probe_cgroups()
        assert host is not None
        assert not (host.memory_dir / outcome.sandbox_id).exists()


SYSV_SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.restype = ctypes.c_int
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
[libc.shmget(IPC_PRIVATE, size << 20, IPC_CREAT | 0o600) >= 0 for size in {sizes}]
"""


def host_sysv_segments() -> list[str]:
    with open("/proc/sysvipc/shm", encoding="ascii") as handle:
        return handle.read().splitlines()[1:]


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root host gives the process sandbox an IPC namespace")
async def test_system_v_shared_memory_is_capped_like_tmp_and_dies_with_a_process_sandbox(
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    # System V segments outlive their processes and nobody needs to map them: in the sandbox's
    # own IPC namespace they are capped at tmpfs_mb in all and go when the sandbox goes.
    config = SandboxConfig(backend="process", pool_size=0, tmpfs_mb=32, cgroups="off")
    before = host_sysv_segments()
    async with SandboxManager(config) as manager:
        # One segment over the cap, then three that fit one by one but not all together.
        code = SYSV_SHM.format(sizes=(64, 12, 12, 12))
        outcome = await manager.run(Program(code), binding=new_binding(), modules=stub_tree, handler=handler)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == [False, True, True, False]
    no_leftovers()
    assert host_sysv_segments() == before
