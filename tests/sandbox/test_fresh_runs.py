"""A fresh run in a reused sandbox (what a batch worker's session gives each item) starts clean.

A batch worker keeps one sandbox for item after item (a cold sandbox per item would cost more
than the item), so what one item leaves behind must not reach the next: files in the temporary
directory or the working directory, processes (a child, a double-forked daemon), modules and
module attributes, environment variables, globals. A session's plain runs keep all of that on
purpose; the last test checks they still do.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from codemode import CodeMode, config_from_mapping
from codemode.batch import BatchOptions
from codemode.sandbox import Program, SandboxManager

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

LEAVE_EVERYTHING = """
import builtins, json, os, sys, tempfile, time, types
import colorsys

open(os.path.join(tempfile.gettempdir(), "left-in-tmp"), "w").write("x")
open("left-in-cwd", "w").write("x")
locked = os.path.join(tempfile.gettempdir(), "locked")
os.makedirs(os.path.join(locked, "inner"))
open(os.path.join(locked, "inner", "f"), "w").write("x")
os.chmod(locked, 0o500)  # its owner may not remove what it holds, until it gives itself the right
LEFT_GLOBAL = 1
sys.modules["codemode_left_module"] = types.ModuleType("codemode_left_module")
json.LEFT = colorsys.LEFT = builtins.LEFT = 1
os.environ["CODEMODE_LEFT"] = "1"
sleeper = [sys.executable, "-c", "import time; time.sleep(1000)", MARK]
pid = os.fork()
if pid == 0:
    # A daemon: a new session, its parent gone, so it is nobody's child in the program's tree.
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, sleeper)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.2)
"left"
"""

LOOK_AROUND = """
import builtins, json, os, sys, tempfile
import colorsys


def marked():
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                found += MARK.encode() in handle.read()
        except OSError:
            pass
    return found


SEEN = {
    "tmp": sorted(os.listdir(tempfile.gettempdir())),
    "cwd": sorted(os.listdir(".")),
    "global": "LEFT_GLOBAL" in globals(),
    "module": "codemode_left_module" in sys.modules,
    "attributes": [hasattr(m, "LEFT") for m in (json, colorsys, builtins)],
    "environ": "CODEMODE_LEFT" in os.environ,
    "processes": marked(),
}
SEEN
"""

LEAVE_A_CHILD = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", MARK])
"left"
"""

CLEAN = {
    "tmp": [],
    "cwd": [],
    "global": False,
    "module": False,
    "attributes": [False, False, False],
    "environ": False,
    "processes": 0,
}


@pytest.fixture
def mark() -> Iterator[str]:
    """A word in the command line of every process the test's programs start; any still running
    on this host at the end (a process backend sandbox's escapee) is killed."""
    word = f"codemode-left-{uuid.uuid4().hex}"
    yield word
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if word in (process.info["cmdline"] or []):
                process.kill()


async def two_fresh_runs(
    config: Any, stub_tree: Any, handler: Any, new_binding: Callable[..., Any], mark: str, first: str
) -> tuple[Any, Any]:
    """``first`` then :data:`LOOK_AROUND`, both fresh, in one session's sandbox."""
    async with SandboxManager(config) as manager:
        session = await manager.open_session(principal="alice", tenant="acme")
        left, looked = [
            await session.run(
                Program(code, bindings={"MARK": mark}, fresh=True),
                binding=new_binding(),
                modules=stub_tree,
                handler=handler,
            )
            for code in (first, LOOK_AROUND)
        ]
    assert (left.status, left.result) == ("ok", "left"), left.error
    assert looked.status == "ok", looked.error
    # The same sandbox served both: the reset kept it, nothing discarded it.
    assert looked.sandbox_id == left.sandbox_id
    return left, looked


async def test_a_fresh_run_in_a_reused_sandbox_finds_nothing_the_run_before_left(
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    mark: str,
) -> None:
    config = make_config(pool_size=0)
    _, looked = await two_fresh_runs(config, stub_tree, handler, new_binding, mark, LEAVE_EVERYTHING)
    assert looked.result == CLEAN


async def test_a_child_left_running_by_a_fresh_run_ends_with_it_and_the_sandbox_serves_on(
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
    mark: str,
) -> None:
    config = make_config(pool_size=0)
    left, looked = await two_fresh_runs(config, stub_tree, handler, new_binding, mark, LEAVE_A_CHILD)
    assert "left" not in left.stderr  # no "left ... running; its sandbox was discarded" note
    assert looked.result == CLEAN


async def test_a_stub_module_changed_by_a_fresh_run_is_as_the_host_made_it_in_the_next(
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
) -> None:
    # Fresh runs keep the host's modules (fetching and compiling them again per item costs more
    # than the item), so what a run does to them is undone.
    change = "import servers.demo\nservers.demo.LEFT = 1\nservers.demo.add = None\n"
    use = (
        "from servers.demo import add\nimport servers.demo\n[hasattr(servers.demo, 'LEFT'), add(a=1, b=2)]\n"
    )
    async with SandboxManager(make_config(pool_size=0)) as manager:
        session = await manager.open_session(principal="alice", tenant="acme")
        for code in (change, use):
            outcome = await session.run(
                Program(code, fresh=True), binding=new_binding(), modules=stub_tree, handler=handler
            )
            assert outcome.status == "ok", outcome.error
    assert outcome.result == [False, {"total": 3}]


async def test_a_session_run_that_is_not_fresh_still_keeps_what_the_one_before_left(
    make_config: Callable[..., Any],
    stub_tree: Any,
    handler: Any,
    new_binding: Callable[..., Any],
) -> None:
    write = "import colorsys\nopen('kept', 'w').write('x')\nKEPT = 1\ncolorsys.KEPT = 1\n"
    read = "import colorsys, os\n[KEPT, colorsys.KEPT, os.path.exists('kept')]\n"
    async with SandboxManager(make_config(pool_size=0)) as manager:
        session = await manager.open_session(principal="alice", tenant="acme")
        for code in (write, read):
            outcome = await session.run(
                Program(code), binding=new_binding(), modules=stub_tree, handler=handler
            )
            assert outcome.status == "ok", outcome.error
    assert outcome.result == [1, 1, True]


# -- through the engine: a batch job's items, and one-shot runs ---------------------------------

BATCH_PROGRAM = """
import codemode
exec(LEAVE_EVERYTHING if INPUT["step"] == "leave" else LOOK_AROUND, globals())
codemode.result(SEEN if INPUT["step"] == "look" else "left")
"""


def engine_config(make_config: Callable[..., Any], tmp_path: Path) -> Any:
    sandbox = make_config(pool_size=1).model_dump(mode="json")
    return config_from_mapping({"sandbox": sandbox}, base_dir=tmp_path)


async def test_the_second_item_of_a_batch_job_finds_nothing_the_first_left(
    make_config: Callable[..., Any], tmp_path: Path, mark: str
) -> None:
    # One worker, so both items run on its one session's sandbox, one after the other.
    options = BatchOptions(job_id="isolation", key="id", concurrency=1)
    items = [{"id": "a", "step": "leave"}, {"id": "b", "step": "look"}]
    bindings = {"MARK": mark, "LEAVE_EVERYTHING": LEAVE_EVERYTHING, "LOOK_AROUND": LOOK_AROUND}
    program = "".join(f"{name} = {value!r}\n" for name, value in bindings.items()) + BATCH_PROGRAM
    async with CodeMode(engine_config(make_config, tmp_path)) as engine:
        results = {result.key: result async for result in engine.batch(program, items, options)}
    assert {key: result.status for key, result in results.items()} == {"a": "done", "b": "done"}
    assert results["b"].result == CLEAN


async def test_one_shot_runs_from_the_warm_pool_never_share_a_sandbox(
    make_config: Callable[..., Any], tmp_path: Path, mark: str
) -> None:
    async with CodeMode(engine_config(make_config, tmp_path)) as engine:
        left = await engine.run(LEAVE_EVERYTHING, bindings={"MARK": mark})
        looked = await engine.run(LOOK_AROUND, bindings={"MARK": mark})
    assert (left.status, left.result) == ("ok", "left"), left.error
    assert looked.status == "ok", looked.error
    assert looked.result == CLEAN
