"""CodeMode with the in-process sandbox (codemode.testing.in_process_sandbox): no process at all.

The MCP server is in memory and the program runs in a thread of this process, through the real
runtime, channel, broker, gates and ledger.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import psutil
import pytest
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from codemode import CodeMode, config_from_mapping
from codemode.errors import ConfigError
from codemode.ledger import Ledger
from codemode.testing import in_process_sandbox, memory_ledger
from tests.test_engine_in_memory import approved_in_memory_crm

pytestmark = pytest.mark.anyio


def crm_server() -> MCPServer:
    app = MCPServer("crm", version="2.0.0")

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    def get_customer(customer_id: str) -> dict[str, str]:
        """Look up one customer."""
        return {"id": customer_id, "name": f"Acme {customer_id}"}

    @app.tool()
    def delete_customer(customer_id: str) -> str:
        """Delete a customer."""
        return f"deleted {customer_id}"

    return app


def children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


@pytest.fixture
def ledger() -> Ledger:
    return memory_ledger()


@pytest.fixture
async def engine(tmp_path: Path, ledger: Ledger) -> AsyncIterator[CodeMode]:
    """A CodeMode whose crm server is in memory (tools approved) and whose sandbox is in process."""
    # The configured backend would be a real one: the seam replaces it, whatever it says.
    sandbox = {"backend": "docker", "pool_size": 0, "wall_time_s": 10}
    config, transports = await approved_in_memory_crm(tmp_path, crm_server(), sandbox=sandbox)
    async with CodeMode(
        config, ledger=ledger, transports=transports, sandbox_backend=in_process_sandbox()
    ) as running:
        yield running


async def test_a_program_calls_in_memory_tools_without_starting_a_process(engine: CodeMode) -> None:
    before = children()
    program = (
        "from servers.crm import get_customer\n"
        "from codemode_runtime import parallel\n"
        "names = parallel(get_customer, [{'customer_id': f'C{i}'} for i in range(3)])\n"
        "{'first': get_customer(customer_id='C9')['name'], 'all': [n['id'] for n in names]}\n"
    )
    result = await engine.run(program)
    assert result.status == "ok", result.error
    assert result.result == {"first": "Acme C9", "all": ["C0", "C1", "C2"]}
    assert result.calls == 4
    assert engine.backend == "in_process"
    assert result.backend == "in_process"
    assert children() == before, "the in-process sandbox started a process"


async def test_a_denied_call_is_denied_and_recorded(engine: CodeMode, ledger: Ledger) -> None:
    program = (
        "from servers.crm import delete_customer\n"
        "from codemode_runtime import CallDenied\n"
        "try:\n"
        "    delete_customer(customer_id='C1')\n"
        "except CallDenied as denied:\n"
        "    outcome = denied.gate\n"
        "outcome\n"
    )
    result = await engine.run(program)
    assert result.status == "ok", result.error
    # Not read-only: the consent gate needs an approval and no approver is configured.
    assert result.result == "consent"
    assert result.denials == 1
    calls = [(c.tool, str(c.state), c.run_id) for c in ledger.list_calls(newest_first=False)]
    assert calls == [("delete_customer", "denied", result.run_id)]


async def test_a_program_that_raises_is_an_error_with_its_traceback(engine: CodeMode) -> None:
    program = "def fail():\n    raise ValueError('no such customer')\n\nfail()\n"
    result = await engine.run(program)
    assert result.status == "error"
    assert result.error is not None
    assert (result.error.kind, result.error.type) == ("exception", "ValueError")
    assert result.error.message == "no such customer"
    assert 'File "<program>", line 4, in <module>' in result.error.traceback
    assert "in fail" in result.error.traceback
    # The runtime's own frames (and this process's thread machinery) are left out.
    assert "codemode_runtime" not in result.error.traceback
    assert "threading" not in result.error.traceback


async def test_output_is_captured_per_run(engine: CodeMode, capsys: pytest.CaptureFixture[str]) -> None:
    program = "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\n"
    result = await engine.run(program)
    assert result.status == "ok", result.error
    assert result.result_kind == "stdout"
    assert result.stdout == "to stdout\n"
    assert result.stderr == "to stderr\n"
    # The test process's own streams saw none of it, and are its own again.
    assert capsys.readouterr() == ("", "")
    print("after the run")
    assert capsys.readouterr().out == "after the run\n"


async def test_a_session_keeps_state_between_runs(engine: CodeMode) -> None:
    session = await engine.open_session()
    assert (await engine.run("x = 41", session_id=session)).status == "ok"
    kept = await engine.run("x + 1", session_id=session)
    assert kept.result == 42, kept.error
    # A run without the session gets a fresh sandbox: nothing of the session's state.
    fresh = await engine.run("x")
    assert fresh.status == "error" and fresh.error is not None and fresh.error.type == "NameError"


async def test_the_wall_time_limit_ends_a_run(engine: CodeMode) -> None:
    # The host stops waiting and closes the channel; the program's thread is abandoned until its
    # sleep ends, and its late reply finds the channel closed.
    result = await engine.run("import time\ntime.sleep(0.5)\n'late'", wall_time_s=0.1)
    assert result.status == "error"
    assert result.error is not None and result.error.kind == "timeout"


async def test_concurrent_runs_keep_their_own_channel_result_and_output(engine: CodeMode) -> None:
    """Several in-process sandboxes share one interpreter: each run talks through its own channel."""
    template = (
        "import time\n"
        "from servers.crm import get_customer\n"
        "from codemode_runtime import result\n"
        "for _ in range(3):\n"
        "    print(get_customer(customer_id='{id}')['id'])\n"
        "    time.sleep(0.01)\n"
        "result('{id}')\n"
    )
    results: dict[str, tuple[object, str]] = {}

    async def run(customer: str) -> None:
        done = await engine.run(template.format(id=customer))
        assert done.status == "ok", done.error
        results[customer] = (done.result, done.stdout)

    async with anyio.create_task_group() as tg:
        for customer in ("A", "B", "C"):
            tg.start_soon(run, customer)
    assert results == {c: (c, f"{c}\n{c}\n{c}\n") for c in ("A", "B", "C")}


def test_no_configuration_selects_the_in_process_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        config_from_mapping({"sandbox": {"backend": "in_process"}}, base_dir=tmp_path)
