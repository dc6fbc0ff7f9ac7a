"""The in-sandbox runtime: its API matches the .pyi, and programs' results come back as specified."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codemode.sandbox._files import RUNTIME_PACKAGE, WIRE_SOURCE
from codemode.sandbox._wire import PROTOCOL_VERSION

pytestmark = pytest.mark.anyio


@pytest.mark.integration
def test_the_runtime_implements_the_stub_api(staged: Path, tmp_path: Path) -> None:
    """mypy's stubtest compares the runtime package with its own ``__init__.pyi``.

    On the way mypy type-checks every module of the staged runtime, so the runtime's messages
    must have the wire contract's shapes (its TypedDicts). The stub declares the classes'
    attributes but no constructors (programs receive instances, they do not build them), and no
    ``__all__``: those two differences are allowed, and so are the wire's ``Literal`` aliases,
    which stubtest cannot compare with their runtime objects.
    """
    assert importlib.util.find_spec("mypy") is not None, "mypy (a dev dependency) provides stubtest"
    allowlist = tmp_path / "allowlist.txt"
    allowlist.write_text(
        "codemode_runtime\\.__all__\n"
        "codemode_runtime\\.\\w+\\.__init__\n"
        "codemode_runtime\\._wire\\.(Status|ResultKind|OutcomeKind)\n"
    )
    env = {**os.environ, "MYPYPATH": str(staged), "PYTHONPATH": str(staged)}
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", RUNTIME_PACKAGE, "--allowlist", str(allowlist)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
def test_the_runtime_imports_only_the_standard_library(staged: Path) -> None:
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(staged)!r})\n"
        "before = set(sys.modules)\n"
        "import codemode_runtime, codemode_runtime._serve\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "bad = sorted(m for m in new if m not in sys.stdlib_module_names and m != 'codemode_runtime')\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    for module in (staged / RUNTIME_PACKAGE).glob("*.py"):
        source = module.read_text()
        for forbidden in (
            "import mcp",
            "import docker",
            "import pydantic",
            "import codemode.",
            "from codemode",
        ):
            assert forbidden not in source, f"{module.name}: {forbidden}"


def test_no_runtime_module_exceeds_400_lines(staged: Path) -> None:
    sizes = {
        path.name: len(path.read_text().splitlines()) for path in (staged / RUNTIME_PACKAGE).glob("*.py")
    }
    assert len(sizes) > 5, sizes
    # The wire contract is one file by design (both ends read the same bytes) and grows with each
    # message the protocol gains: it is held to the house's 600 lines, the runtime's own to 400.
    assert sizes.pop("_wire.py") <= 600
    assert max(sizes.values()) <= 400, sizes


@pytest.mark.integration
async def test_the_runtime_in_the_sandbox_reads_the_hosts_wire_contract(
    run_program: Callable[..., Any],
) -> None:
    """The copy of ``_wire`` a running sandbox imported is byte for byte the host's module."""
    code = (
        "import hashlib, codemode_runtime._wire as wire\n"
        "[hashlib.sha256(open(wire.__file__, 'rb').read()).hexdigest(), wire.PROTOCOL_VERSION]\n"
    )
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == [hashlib.sha256(WIRE_SOURCE.read_bytes()).hexdigest(), PROTOCOL_VERSION]


@pytest.mark.integration
async def test_the_trailing_expression_is_the_result(run_program: Callable[..., Any]) -> None:
    outcome = await run_program("x = [1, 2]\nprint('side effect')\n{'sum': sum(x), 'items': x}\n")
    assert (outcome.status, outcome.result_kind, outcome.result) == (
        "ok",
        "json",
        {"sum": 3, "items": [1, 2]},
    )
    assert outcome.stdout == "side effect\n"
    assert outcome.final == {"sum": 3, "items": [1, 2]}


@pytest.mark.integration
async def test_an_explicit_result_wins_over_the_trailing_expression(run_program: Callable[..., Any]) -> None:
    outcome = await run_program("import codemode\ncodemode.result({'explicit': True})\n'ignored'\n")
    assert outcome.result == {"explicit": True}


@pytest.mark.integration
async def test_without_a_value_the_printed_output_is_the_result(run_program: Callable[..., Any]) -> None:
    outcome = await run_program("import os\nprint('hello')\nos.write(1, b'from the fd\\n')\nNone\n")
    assert (outcome.status, outcome.result_kind, outcome.result) == ("ok", "stdout", None)
    assert outcome.stdout == "hello\nfrom the fd\n"
    assert outcome.final == outcome.stdout


@pytest.mark.integration
async def test_child_processes_output_is_captured(run_program: Callable[..., Any]) -> None:
    code = "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(\"from a child\")'])\n"
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.stdout == "from a child\n"


@pytest.mark.integration
async def test_values_that_are_not_json_come_back_as_a_repr(run_program: Callable[..., Any]) -> None:
    outcome = await run_program(
        "class Point:\n    def __repr__(self):\n        return 'Point(1, 2)'\n\nPoint()\n"
    )
    assert (outcome.result_kind, outcome.result, outcome.result_repr) == ("repr", None, "Point(1, 2)")
    outcome = await run_program("float('nan')")
    assert (outcome.result_kind, outcome.result_repr) == ("repr", "nan")


@pytest.mark.integration
async def test_a_result_over_the_cap_is_truncated_with_a_flag(run_program: Callable[..., Any]) -> None:
    outcome = await run_program("['x' * 100] * 1000", result_bytes=4096)
    assert outcome.result_truncated
    assert outcome.result is None
    assert outcome.result_repr is not None
    assert len(outcome.result_repr.encode()) == 4096
    assert outcome.result_repr.startswith('["xxxx')


@pytest.mark.integration
async def test_top_level_await_runs_in_an_event_loop(run_program: Callable[..., Any]) -> None:
    outcome = await run_program(
        "import asyncio\nawait asyncio.sleep(0)\n"
        "await asyncio.gather(*[asyncio.sleep(0, i) for i in range(3)])\n"
    )
    assert outcome.result == [0, 1, 2]


@pytest.mark.integration
async def test_a_syntax_error_is_reported_without_compiler_frames(run_program: Callable[..., Any]) -> None:
    outcome = await run_program("def broken(:\n    pass\n")
    assert outcome.status == "error"
    assert outcome.error.type == "SyntaxError"
    assert outcome.error.traceback.startswith('  File "<program>", line 1')
    assert "ast.py" not in outcome.error.traceback


@pytest.mark.integration
async def test_sys_exit_zero_is_success_and_non_zero_is_an_error(run_program: Callable[..., Any]) -> None:
    ok = await run_program("import sys\nprint('bye')\nsys.exit(0)\n")
    assert (ok.status, ok.stdout) == ("ok", "bye\n")
    failed = await run_program("import sys\nsys.exit(3)\n")
    assert failed.status == "error"
    assert failed.error.type == "SystemExit"
    assert "status 3" in failed.error.message


@pytest.mark.integration
async def test_the_runtime_is_importable_as_codemode_and_forked_children_cannot_call(
    run_program: Callable[..., Any],
) -> None:
    code = (
        "import os, codemode, codemode_runtime\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        codemode.call_tool('demo', 'add', 'h', {'a': 1, 'b': 1})\n"
        "        os.write(w, b'called')\n"
        "    except codemode.CallFailed as exc:\n"
        "        os.write(w, exc.reason.encode())\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "[codemode is codemode_runtime, os.read(r, 200).decode()]\n"
    )
    outcome = await run_program(code)
    assert outcome.status == "ok", outcome.error
    assert outcome.result == [True, "stub calls are not available in a forked child process"]


@pytest.mark.integration
def test_killing_a_runs_processes_never_waits_on_a_child_it_did_not_kill(staged: Path) -> None:
    """A child forked after the runtime listed its descendants (by a thread the run left) is not
    killed in that round: reaping must not block on it, or the runtime would hang for ever."""
    code = (
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(staged)!r})\n"
        "from codemode_runtime import _fresh\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "_fresh._reap(pid)\n"
        "os.kill(pid, 0)  # still there: reaping returned without waiting for it to exit\n"
        "assert _fresh.kill_descendants(), 'the sleeping child is killed in the next round'\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
