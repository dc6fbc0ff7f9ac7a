"""The manager: warm pool, one sandbox per run, sessions, backend choice, orphan cleanup."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from codemode.config import SandboxConfig
from codemode.errors import SandboxError, SandboxUnavailableError
from codemode.sandbox import Program, SandboxManager, choose_backend, run_once
from codemode.sandbox._state import HostToken, StateDir, default_base

pytestmark = pytest.mark.anyio


@pytest.mark.integration
async def test_each_run_gets_a_fresh_warm_sandbox_and_nothing_leaks_between_runs(
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    first_code = "secret = 'from run one'\nopen('/tmp/left-behind', 'w').write('x')\n'written'\n"
    second_code = "import os\n['secret' in globals(), os.path.exists('/tmp/left-behind')]\n"
    async with SandboxManager(make_config(pool_size=2)) as manager:
        await manager.wait_ready()
        first = await manager.run(
            Program(first_code), binding=new_binding(), modules=stub_tree, handler=handler
        )
        await manager.wait_ready()
        second = await manager.run(
            Program(second_code), binding=new_binding(), modules=stub_tree, handler=handler
        )
    assert (first.status, first.result) == ("ok", "written")
    assert (second.status, second.result) == ("ok", [False, False])
    assert first.sandbox_id != second.sandbox_id
    no_leftovers()


@pytest.mark.integration
async def test_settle_waits_for_the_refill_and_for_the_used_sandbox_to_be_gone(
    make_config: Callable[..., Any], stub_tree: Any, handler: Any, new_binding: Callable[..., Any]
) -> None:
    async with SandboxManager(make_config(pool_size=1)) as manager:
        await manager.settle()
        assert (manager.warm_ready, manager.tearing_down) == (1, 0)
        outcome = await manager.run(
            Program("1 + 1"), binding=new_binding(), modules=stub_tree, handler=handler
        )
        assert outcome.result == 2
        assert manager.tearing_down == 1  # destroyed in the background, after the run returned
        await manager.settle()
        assert (manager.warm_ready, manager.tearing_down) == (1, 0)


@pytest.mark.integration
async def test_a_warm_run_is_much_faster_than_a_cold_one(
    make_config: Callable[..., Any], stub_tree: Any, handler: Any, new_binding: Callable[..., Any]
) -> None:
    async with SandboxManager(make_config(pool_size=1)) as manager:
        warm: list[float] = []
        for _ in range(5):
            await manager.wait_ready()
            outcome = await manager.run(
                Program("1 + 1"), binding=new_binding(), modules=stub_tree, handler=handler
            )
            assert outcome.result == 2
            warm.append(outcome.duration_ms)
    async with SandboxManager(make_config(pool_size=0)) as manager:
        started = anyio.current_time()
        await manager.run(Program("1 + 1"), binding=new_binding(), modules=stub_tree, handler=handler)
        cold_ms = (anyio.current_time() - started) * 1000
    assert sorted(warm)[2] < 100
    assert sorted(warm)[2] * 3 < cold_ms


@pytest.mark.integration
async def test_a_session_keeps_interpreter_state_for_its_principal_only(
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    async with SandboxManager(make_config(pool_size=1)) as manager:
        async with await manager.open_session(principal="alice", tenant="acme") as session:
            one = await session.run(
                Program("counter = 41"), binding=new_binding(), modules=stub_tree, handler=handler
            )
            two = await session.run(
                Program("from servers.demo import add\ncounter += 1\nadd(a=counter, b=0)"),
                binding=new_binding(),
                modules=stub_tree,
                handler=handler,
            )
            assert (one.status, two.status, two.result) == ("ok", "ok", {"total": 42})
            assert one.sandbox_id == two.sandbox_id
            assert one.run_id != two.run_id
            with pytest.raises(SandboxError, match="principal"):
                await session.run(
                    Program("counter"),
                    binding=new_binding(principal="mallory"),
                    modules=stub_tree,
                    handler=handler,
                )
        assert session.closed
        with pytest.raises(SandboxError, match="closed"):
            await session.run(Program("1"), binding=new_binding(), modules=stub_tree, handler=handler)
    no_leftovers()


@pytest.mark.integration
async def test_a_session_whose_run_times_out_is_over(
    make_config: Callable[..., Any], stub_tree: Any, handler: Any, new_binding: Callable[..., Any]
) -> None:
    async with SandboxManager(make_config()) as manager:
        session = await manager.open_session(principal="alice", tenant="acme")
        spun = await session.run(
            Program("while True:\n    pass", wall_time_s=1.0),
            binding=new_binding(),
            modules=stub_tree,
            handler=handler,
        )
        assert spun.error is not None
        assert spun.error.kind == "timeout"
        assert not session.alive
        after = await session.run(Program("1"), binding=new_binding(), modules=stub_tree, handler=handler)
        assert after.status == "error"
        assert after.error is not None
        assert after.error.type == "SessionEnded"
        await session.aclose()


LEAVES_A_THREAD = """
import threading, time
from servers.demo import add
def later():
    for i in range(20):
        time.sleep(0.1)
        add(a=i, b=0)
threading.Thread(target=later, daemon=True).start()
'started'
"""


@pytest.mark.integration
async def test_a_program_that_leaves_a_thread_running_ends_its_session(
    make_config: Callable[..., Any], stub_tree: Any, handler: Any, new_binding: Callable[..., Any]
) -> None:
    # Left running, the thread would call tools during the session's next run, under its identity.
    async with SandboxManager(make_config()) as manager:
        session = await manager.open_session(principal="alice", tenant="acme")
        run = await session.run(
            Program(LEAVES_A_THREAD), binding=new_binding(), modules=stub_tree, handler=handler
        )
        assert (run.status, run.result) == ("ok", "started")
        assert "left 1 thread(s) or process(es) running" in run.stderr
        assert not session.alive
        joined = await session.run(
            Program("import threading\nt = threading.Thread(target=print)\nt.start()\nt.join()"),
            binding=new_binding(),
            modules=stub_tree,
            handler=handler,
        )
        assert joined.error is not None and joined.error.type == "SessionEnded"
        await anyio.sleep(0.5)
        assert handler.requests == [], "the thread never reached the host"
        await session.aclose()


@pytest.mark.integration
async def test_threads_joined_before_the_end_keep_the_session(
    make_config: Callable[..., Any], stub_tree: Any, handler: Any, new_binding: Callable[..., Any]
) -> None:
    program = (
        "import codemode_runtime, threading\nfrom servers.demo import add\n"
        "t = threading.Thread(target=print)\nt.start()\nt.join()\n"
        "codemode_runtime.parallel(add, [{'a': i, 'b': 1} for i in range(8)], max_workers=4)"
    )
    async with (
        SandboxManager(make_config()) as manager,
        await manager.open_session(principal="alice", tenant="acme") as session,
    ):
        run = await session.run(Program(program), binding=new_binding(), modules=stub_tree, handler=handler)
        assert run.status == "ok" and "left" not in run.stderr, run.stderr
        assert session.alive


@pytest.mark.integration
async def test_closing_the_manager_destroys_the_pool(
    make_config: Callable[..., Any], no_leftovers: Callable[[], None]
) -> None:
    async with SandboxManager(make_config(pool_size=3)) as manager:
        await manager.wait_ready()
    no_leftovers()
    with pytest.raises(SandboxError, match="not running"):
        await manager.run(Program("1"), binding=None, modules=None, handler=None)  # type: ignore[arg-type]


@pytest.mark.integration
async def test_run_once_runs_without_a_pool(
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    outcome = await run_once(
        Program("print('hi')"),
        config=make_config(pool_size=4),
        binding=new_binding(),
        modules=stub_tree,
        handler=handler,
    )
    assert (outcome.status, outcome.stdout, outcome.result_kind) == ("ok", "hi\n", "stdout")
    no_leftovers()


CRASHING_HOST = textwrap.dedent(
    """
    import os, sys
    import anyio
    from codemode.config import SandboxConfig
    from codemode.sandbox import SandboxManager

    async def main():
        config = SandboxConfig(backend=sys.argv[1], image=sys.argv[2], pool_size=2)
        async with SandboxManager(config) as manager:
            await manager.wait_ready()
            print("ready", os.getpid(), flush=True)
            os._exit(9)  # a host that dies without cleaning up

    anyio.run(main)
    """
)


@pytest.mark.integration
async def test_orphans_of_a_crashed_host_are_removed_when_the_next_host_starts(
    backend: str,
    tmp_path: Path,
    make_config: Callable[..., Any],
    leftovers: Any,
    no_leftovers: Callable[[], None],
) -> None:
    script = tmp_path / "crashing_host.py"
    script.write_text(CRASHING_HOST)
    config = make_config()
    crashed = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, str(script), backend, config.image], capture_output=True, text=True, timeout=120
        )
    )
    assert crashed.returncode == 9, crashed.stderr
    said, pid = crashed.stdout.split()
    assert said == "ready"
    # Only the crashed host's own sandboxes are counted: another xdist worker's manager may sweep
    # them first, or leave orphans of its own at the same moment.
    assert 0 < len(leftovers.dirs_of(int(pid))) <= 2
    if backend == "docker":
        assert 0 < len(leftovers.containers_owned_by(int(pid))) <= 2
    async with SandboxManager(config):
        assert leftovers.dirs_of(int(pid)) == []
        assert leftovers.containers_owned_by(int(pid)) == []
    no_leftovers()


async def test_process_backend_is_always_available_but_warns() -> None:
    choice = await choose_backend(SandboxConfig(backend="process"))
    assert choice.name == "process"
    assert choice.warning is not None
    assert "last resort" in choice.reason


@pytest.mark.integration
async def test_the_process_backend_in_force_is_logged_as_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="codemode.sandbox"):
        async with SandboxManager(SandboxConfig(backend="process", pool_size=0)) as manager:
            assert manager.backend.warning
    assert any("process backend is in force" in record.getMessage() for record in caplog.records)


@pytest.mark.bwrap
async def test_bwrap_backend_says_what_it_enforces(bwrap_ready: None) -> None:
    choice = await choose_backend(SandboxConfig(backend="bwrap"))
    assert (choice.name, choice.warning) == ("bwrap", None)
    async with SandboxManager(SandboxConfig(backend="bwrap", pool_size=0)) as manager:
        assert manager.backend.name == "bwrap"
        for word in ("user, pid, ipc, uts and network namespaces", "seccomp", "no new privileges"):
            assert word in manager.backend.isolation


async def test_bwrap_backend_without_bwrap_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("codemode.sandbox._bwrap.find_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        await choose_backend(SandboxConfig(backend="bwrap"))


@pytest.mark.docker
async def test_auto_picks_docker_when_the_image_exists_and_says_why(docker_image: str) -> None:
    choice = await choose_backend(SandboxConfig(backend="auto", image=docker_image))
    assert choice.name == "docker"
    assert "image" in choice.reason


@pytest.mark.docker
@pytest.mark.bwrap
async def test_auto_falls_back_to_bwrap_without_the_image(docker_image: str, bwrap_ready: None) -> None:
    config = SandboxConfig(backend="auto", image="codemode-no-such-image:nope", pool_size=0)
    choice = await choose_backend(config)
    assert (choice.name, choice.warning) == ("bwrap", None)
    assert "missing" in choice.reason
    assert "codemode sandbox build" in choice.reason
    async with SandboxManager(config) as manager:
        assert manager.backend.name == "bwrap"


@pytest.mark.docker
async def test_auto_falls_back_to_the_process_backend_without_the_image_or_bwrap(
    docker_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("codemode.sandbox._bwrap.find_bwrap", lambda: None)
    config = SandboxConfig(backend="auto", image="codemode-no-such-image:nope", pool_size=0)
    choice = await choose_backend(config)
    assert choice.name == "process"
    assert "missing" in choice.reason
    assert "bubblewrap" in choice.reason
    assert choice.warning is not None
    async with SandboxManager(config) as manager:
        assert manager.backend.name == "process"
        assert "weaker" in manager.backend.isolation


@pytest.mark.bwrap
async def test_a_warm_bwrap_sandbox_outlives_the_worker_thread_that_started_it(
    bwrap_ready: None,
    monkeypatch: pytest.MonkeyPatch,
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    no_leftovers: Callable[[], None],
) -> None:
    # bwrap --die-with-parent kills the sandbox when the *thread* that forked it exits. anyio
    # retires idle worker threads (after 10 s; 0 here, so that every call prunes the idle ones).
    from anyio._backends._asyncio import WorkerThread

    monkeypatch.setattr(WorkerThread, "MAX_IDLE_TIME", 0)
    async with SandboxManager(SandboxConfig(backend="bwrap", pool_size=1, wall_time_s=20.0)) as manager:
        await manager.wait_ready()
        tids = [t.native_id for t in threading.enumerate() if t.name == "AnyIO worker thread"]
        warm = [pid for pid in _my_sandbox_pids() if psutil.pid_exists(pid)]
        assert tids and len(warm) == 1
        deadline = time.monotonic() + 20
        # Gone from /proc/self/task: the kernel has finished the thread's exit (and sent PDEATHSIG).
        while any(os.path.exists(f"/proc/self/task/{tid}") for tid in tids):  # noqa: ASYNC240
            assert time.monotonic() < deadline, "anyio kept its worker threads"
            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(anyio.to_thread.run_sync, time.sleep, 0.01)
            await anyio.to_thread.run_sync(lambda: None)
        assert psutil.Process(warm[0]).status() != psutil.STATUS_ZOMBIE
        outcome = await manager.run(
            Program("6 * 7"), binding=new_binding(), modules=stub_tree, handler=handler
        )
        assert (outcome.status, outcome.result) == ("ok", 42), outcome.error
    no_leftovers()


def _my_sandbox_pids() -> list[int]:
    """Pids of the bwrap processes this test process started (neighbours' are not counted)."""
    pids: list[int] = []
    for entry in default_base().iterdir():
        meta = StateDir.read_meta(entry) if entry.is_dir() else None
        token = HostToken.decode(str(meta.get("owner", ""))) if meta else None
        if meta and token and token.pid == os.getpid() and isinstance(meta.get("pid"), int):
            pids.append(meta["pid"])
    return pids


@pytest.mark.docker
async def test_docker_backend_without_its_image_is_unavailable(docker_image: str) -> None:
    with pytest.raises(SandboxUnavailableError, match="codemode sandbox build"):
        async with SandboxManager(SandboxConfig(backend="docker", image="codemode-no-such-image:nope")):
            pass
