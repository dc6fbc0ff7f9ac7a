"""What the bubblewrap backend hides and forbids, beyond the suite every backend runs.

Each probe also runs on the process backend where that shows the probe can see a leak: the same
program that finds the host's file or process there must find nothing under bwrap.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from codemode.config import BackendChoice, SandboxConfig
from codemode.errors import SandboxUnavailableError
from codemode.sandbox import Program, SandboxManager
from codemode.sandbox._bwrap import _python_roots  # pyright: ignore[reportPrivateUsage]
from codemode.sandbox._seccomp import DENIED, SYSCALLS, build_filter, current_arch

pytestmark = pytest.mark.anyio


@pytest.fixture
def run_in(stub_tree: Any, handler: Any, new_binding: Callable[..., Any]) -> Callable[..., Any]:
    """``await run_in(backend, code)``: one run in a fresh manager on that backend."""

    async def run(backend: BackendChoice, code: str) -> Any:
        config = SandboxConfig(backend=backend, pool_size=0, wall_time_s=20.0)
        async with SandboxManager(config) as manager:
            return await manager.run(Program(code), binding=new_binding(), modules=stub_tree, handler=handler)

    return run


def local_backends() -> list[Any]:
    return ["process", pytest.param("bwrap", marks=pytest.mark.bwrap)]


READ_FILES = (
    "import os\n"
    "seen = {}\n"
    "for path in PATHS:\n"
    "    try:\n"
    "        seen[path] = open(path).read()\n"
    "    except OSError as exc:\n"
    "        seen[path] = type(exc).__name__\n"
    "seen\n"
)


@pytest.fixture
def planted_files() -> Iterator[dict[str, Path]]:
    """World-readable files with a secret marker under $HOME and under the working directory."""
    marker = f"planted-{secrets.token_hex(8)}"
    files = {
        "home": Path.home() / f".codemode-test-{marker}",
        "cwd": Path.cwd() / f".codemode-test-{marker}",
    }
    for path in files.values():
        path.write_text(marker)
        path.chmod(0o644)
    try:
        yield files
    finally:
        for path in files.values():
            path.unlink(missing_ok=True)


@pytest.mark.bwrap
async def test_files_under_home_and_the_working_directory_are_not_there(
    bwrap_ready: None, run_in: Callable[..., Any], planted_files: Any
) -> None:
    paths = [str(path) for path in planted_files.values()]
    code = f"PATHS = {paths!r}\n" + READ_FILES
    outcome = await run_in("bwrap", code)
    assert outcome.status == "ok", outcome.error
    # Not a permission refusal: the directories are not in the sandbox at all.
    assert outcome.result == dict.fromkeys(paths, "FileNotFoundError")
    directories = [str(Path.home()), os.getcwd()]
    outcome = await run_in("bwrap", f"import os\n[os.path.exists(p) for p in {directories!r}]\n")
    assert outcome.result == [False, False]


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="on a user's machine the process backend runs as that user")
async def test_the_same_probe_finds_a_world_readable_host_file_on_the_process_backend(
    run_in: Callable[..., Any],
) -> None:
    # The control: the probe above can see a leak when there is one. The file sits at the root
    # of the host filesystem, not under /tmp (which the process backend replaces with its own
    # tmpfs), so it holds wherever the checkout is.
    marker = f"planted-{secrets.token_hex(8)}"
    control = Path("/") / f".codemode-test-{marker}"
    control.write_text(marker)
    control.chmod(0o644)
    try:
        outcome = await run_in("process", f"PATHS = {[str(control)]!r}\n" + READ_FILES)
    finally:
        control.unlink(missing_ok=True)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == {str(control): marker}


@pytest.fixture
def host_process() -> Iterator[tuple[int, str]]:
    """A host process with a marker in its command line."""
    marker = f"host-process-{secrets.token_hex(8)}"
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stdin.read()  # {marker}"], stdin=subprocess.PIPE
    )
    try:
        yield proc.pid, marker
    finally:
        proc.kill()
        proc.wait()


LIST_PROCESSES = (
    "import os\n"
    "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
    "found = []\n"
    "for pid in pids:\n"
    "    try:\n"
    "        if MARKER in open(f'/proc/{pid}/cmdline', 'rb').read().decode(errors='replace'):\n"
    "            found.append(pid)\n"
    "    except OSError:\n"
    "        pass\n"
    "{'pids': pids, 'found': found, 'me': os.getpid(), 'host pid visible': os.path.exists(f'/proc/{HOST}')}\n"
)


@pytest.mark.integration
@pytest.mark.parametrize("backend_name", local_backends())
async def test_host_processes_are_invisible_under_bwrap(
    request: pytest.FixtureRequest,
    backend_name: str,
    run_in: Callable[..., Any],
    host_process: tuple[int, str],
    no_leftovers: Callable[[], None],
) -> None:
    if backend_name == "bwrap":
        request.getfixturevalue("bwrap_ready")
    pid, marker = host_process
    code = f"MARKER = {marker!r}\nHOST = {os.getpid()}\n" + LIST_PROCESSES
    outcome = await run_in(backend_name, code)
    assert outcome.status == "ok", outcome.error
    seen = outcome.result
    if backend_name == "process":
        # The control: /proc there is the host's, and the probe finds the marked process.
        assert seen["found"] == [pid]
    else:
        assert seen["found"] == []
        # Its own pid namespace: bwrap's init is 1, the runtime 2, nothing of the host.
        assert seen["pids"][0] == 1
        assert seen["me"] in seen["pids"]
        assert len(seen["pids"]) <= 3, seen["pids"]
    no_leftovers()


@pytest.mark.bwrap
async def test_no_new_privileges_no_capabilities_and_a_seccomp_filter(
    bwrap_ready: None, run_in: Callable[..., Any]
) -> None:
    code = (
        "lines = open('/proc/self/status').read().splitlines()\n"
        "fields = dict(line.split(':\\t', 1) for line in lines if ':\\t' in line)\n"
        "{k: fields[k].strip() for k in ('NoNewPrivs', 'Seccomp', 'CapBnd', 'CapEff', 'CapPrm', 'CapAmb')}\n"
    )
    outcome = await run_in("bwrap", code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == {
        "NoNewPrivs": "1",
        "Seccomp": "2",
        "CapBnd": "0000000000000000",
        "CapEff": "0000000000000000",
        "CapPrm": "0000000000000000",
        "CapAmb": "0000000000000000",
    }


SYSCALL = (
    "import ctypes, errno, os, subprocess, sys, threading\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "def call(nr, *args):\n"
    "    ctypes.set_errno(0)\n"
    "    result = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])\n"
    "    return errno.errorcode.get(ctypes.get_errno(), 'ok') if result < 0 else 'ok'\n"
)
"""A program's start: ``call(nr, *args)`` makes a raw system call and says ``'ok'`` or its errno's
name (the docker profile's tests use it too)."""


@pytest.mark.bwrap
async def test_the_filter_denies_escape_system_calls_and_leaves_threads_and_processes_working(
    bwrap_ready: None, run_in: Callable[..., Any]
) -> None:
    table = current_arch().table
    calls = {
        name: table[name]
        for name in (
            "ptrace",
            "unshare",
            "setns",
            "mount",
            "bpf",
            "keyctl",
            "add_key",
            "perf_event_open",
            "process_vm_readv",
            "io_uring_setup",
            "kexec_load",
            "userfaultfd",
            "clone3",
        )
    }
    code = (
        SYSCALL + f"seen = {{name: call(nr, 0, 0, 0, 0, 0) for name, nr in {calls!r}.items()}}\n"
        # clone with a namespace flag (CLONE_NEWUSER | SIGCHLD) is refused; plain fork still works.
        f"seen['clone(CLONE_NEWUSER)'] = call({table['clone']}, 0x10000000 | 17, 0, 0, 0, 0)\n"
        "box = []\n"
        "thread = threading.Thread(target=lambda: box.append('thread'))\n"
        "thread.start(); thread.join()\n"
        "child = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True)\n"
        "seen['works'] = [box, child.stdout.strip()]\n"
        "seen\n"
    )
    outcome = await run_in("bwrap", code)
    assert outcome.status == "ok", outcome.error
    seen = outcome.result
    assert seen.pop("works") == [["thread"], "42"]
    assert seen.pop("clone3") == "ENOSYS"  # so libc falls back to clone, whose flags the filter reads
    assert seen == dict.fromkeys([*calls.keys() - {"clone3"}, "clone(CLONE_NEWUSER)"], "EPERM")


@pytest.mark.integration
@pytest.mark.parametrize("backend_name", local_backends())
async def test_a_runtime_killed_by_a_signal_is_reported_as_killed(
    request: pytest.FixtureRequest,
    backend_name: str,
    run_in: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    if backend_name == "bwrap":
        request.getfixturevalue("bwrap_ready")
    outcome = await run_in(backend_name, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert outcome.status == "error"
    assert outcome.error.kind == "killed", outcome.error
    assert "SIGKILL" in outcome.error.message
    no_leftovers()


# -- the filter itself -------------------------------------------------------------------------------


def test_an_unknown_architecture_gets_no_filter_rather_than_an_empty_one() -> None:
    with pytest.raises(SandboxUnavailableError, match="riscv64"):
        build_filter("riscv64")
    with pytest.raises(SandboxUnavailableError):
        current_arch("s390x")


def test_the_filter_kills_other_abis_and_ends_every_path_in_a_return() -> None:
    for machine, arch in SYSCALLS.items():
        program = build_filter(machine)
        assert len(program) % 8 == 0
        instructions = [program[i : i + 8] for i in range(0, len(program), 8)]
        code = [int.from_bytes(ins[0:2], sys.byteorder) for ins in instructions]
        k = [int.from_bytes(ins[4:8], sys.byteorder) for ins in instructions]
        # Load the arch, compare it with this ABI's, kill the process on any other.
        assert (code[0], k[0]) == (0x20, 4)
        assert (code[1], k[1]) == (0x15, arch.audit)
        assert (code[2], k[2]) == (0x06, 0x80000000)
        assert code[-1] == 0x06
        denied = {k[i] for i in range(len(code)) if code[i] == 0x15 and i > 1}
        assert {arch.table[name] for name in DENIED} <= denied


@pytest.mark.parametrize(
    ("machine", "header"),
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        ("aarch64", "/usr/include/asm-generic/unistd.h"),
    ],
)
def test_syscall_numbers_match_the_kernel_headers(machine: str, header: str) -> None:
    path = Path(header)
    if not path.is_file():
        pytest.skip(f"{header} is not installed (linux-libc-dev)")
    text = path.read_text()
    numbers = {name: int(nr) for name, nr in re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", text)}
    table = SYSCALLS[machine].table
    assert {name: numbers.get(name) for name in table} == table


@pytest.mark.integration
def test_an_interpreter_installed_over_the_home_directory_is_refused(tmp_path: Path) -> None:
    # An interpreter whose prefix is the home directory (``./configure --prefix=$HOME``): binding its
    # install into the sandbox would bind the whole home, so the backend refuses instead.
    fake = tmp_path / "python3"
    fake.write_text(f"#!/bin/sh\necho {Path.home()}\necho {Path.home()}\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailableError, match="holds the home or the project directory"):
        _python_roots(str(fake))
    system = Path("/usr/bin/python3")
    if system.exists():
        assert _python_roots(str(system)) == []  # everything it needs is under /usr already
