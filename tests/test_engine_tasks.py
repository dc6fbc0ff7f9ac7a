"""Long-running calls end to end: a program's stub call to a task tool, through the broker.

The server is a real stdio process (``tests/fixtures/servers/tasks_server.py``); the program runs
in the in-process sandbox, and once in Docker. What the server was asked is read from its log,
what codemode recorded from the ledger.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from codemode import CallbackElicitor, CodeMode, ElicitationAnswer, ElicitationRequest
from codemode.calls import CallProgress
from codemode.ledger import CallRecord, open_ledger
from codemode.testing import in_process_sandbox
from tests._fixture_server import FixtureServer, deploy_fixture_server

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SERVER = Path(__file__).resolve().parent / "fixtures" / "servers" / "tasks_server.py"
TRY = "try:\n    out = {call}\nexcept Exception as exc:\n    out = f'{{type(exc).__name__}}: {{exc}}'\nout\n"


@dataclass
class Deployment(FixtureServer):
    in_process: bool = True
    """Programs in the in-process sandbox (fast); else in the configured backend."""

    def engine(self, **options: Any) -> CodeMode:
        return super().engine(sandbox_backend=in_process_sandbox() if self.in_process else None, **options)


async def deploy(
    tmp_path: Path, backend: str = "in_process", call_timeout: float = 10, budget_s: float = 600
) -> Deployment:
    deployment = await deploy_fixture_server(
        Deployment,
        tmp_path,
        "tasks",
        SERVER,
        log="tasks.jsonl",
        protocol="legacy",
        backend="process" if backend == "in_process" else backend,
        policy={"budget": {"wall_time_s": budget_s}},
        call_timeout=call_timeout,
    )
    deployment.in_process = backend == "in_process"
    return deployment


@pytest.mark.parametrize("backend", ["in_process", pytest.param("docker", marks=pytest.mark.docker)])
async def test_the_stub_call_blocks_until_the_task_is_done_and_its_id_is_the_receipt(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_image")
    deployment = await deploy(tmp_path, backend)
    program = "from servers.tasks import slow_sum\nslow_sum(a=20, b=22)\n"
    async with deployment.engine() as engine:
        result = await engine.run(program)
    assert result.status == "ok", result.error
    assert result.result == {"sum": 42}
    assert result.backend == backend
    assert len(deployment.requests("tasks/get")) == 3, "it waited for the task's end"
    [call] = deployment.calls()
    assert (call.state, call.receipt) == ("succeeded", "task-1-slow_sum")


async def test_a_failed_task_reaches_the_program_as_the_tools_error(tmp_path: Path) -> None:
    deployment = await deploy(tmp_path)
    async with deployment.engine() as engine:
        result = await engine.run("from servers.tasks import doomed\n" + TRY.format(call="doomed()"))
    assert result.status == "ok", result.error
    assert "the disk is full" in str(result.result)
    [call] = deployment.calls()
    assert call.receipt == "task-1-doomed"


async def cancel_a_run_mid_task(deployment: FixtureServer) -> CallRecord:
    """Start a run of ``forever``, cancel it once its task was polled twice, check that the task
    was cancelled, and give the call's record (both protocol eras' tests use it)."""
    async with deployment.engine() as engine, anyio.create_task_group() as tg:

        async def run() -> None:
            await engine.run("from servers.tasks import forever\nforever()\n")
            raise AssertionError("the run ended by itself")

        tg.start_soon(run)
        with anyio.fail_after(30):
            while len(deployment.requests("tasks/get")) < 2:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert [r["taskId"] for r in deployment.requests("tasks/cancel")] == ["task-1-forever"]
    [call] = deployment.calls()
    assert call.state == "unknown"
    return call


async def test_cancelling_the_run_cancels_the_task(tmp_path: Path) -> None:
    call = await cancel_a_run_mid_task(await deploy(tmp_path))
    assert call.reason == "the run was cancelled during the call"


async def test_a_server_crash_mid_task_is_an_unknown_outcome_not_a_retry(tmp_path: Path) -> None:
    deployment = await deploy(tmp_path)
    async with deployment.engine() as engine:
        result = await engine.run("from servers.tasks import crash\n" + TRY.format(call="crash()"))
    assert result.status == "ok", result.error
    assert "outcome unknown" in str(result.result) and "task-1-crash" in str(result.result)
    assert len(deployment.requests("tools/call")) == 1, "never sent again"
    [call] = deployment.calls()
    assert call.state == "unknown"
    assert call.reason is not None and "task-1-crash: lost" in call.reason


async def test_the_runs_budget_ends_polling_not_the_servers_call_timeout(tmp_path: Path) -> None:
    # The time allowed is what is left of the run's budget (6 s, less the run's start), whatever
    # the machine's load, and never the call timeout (1 s), which bounds each poll only.
    deployment = await deploy(tmp_path, call_timeout=1.0, budget_s=6.0)
    async with deployment.engine() as engine:
        result = await engine.run("from servers.tasks import forever\n" + TRY.format(call="forever()"))
    assert result.status == "ok", result.error
    allowed = re.search(r"not finished in the time allowed \(([\d.]+) s\)", str(result.result))
    assert allowed is not None, result.result
    assert 1.0 < float(allowed[1]) <= 6.0
    assert len(deployment.requests("tasks/get")) > 1, "each poll is bounded by call_timeout, the task is not"
    assert [r["taskId"] for r in deployment.requests("tasks/cancel")] == ["task-1-forever"]
    [call] = deployment.calls()
    assert call.state == "unknown"


async def test_the_runs_wall_time_ends_the_task_too(tmp_path: Path) -> None:
    deployment = await deploy(tmp_path)
    async with deployment.engine() as engine:
        result = await engine.run("from servers.tasks import forever\nforever()\n", wall_time_s=1)
    assert result.error is not None and result.error.kind == "timeout", result.error
    assert [r["taskId"] for r in deployment.requests("tasks/cancel")] == ["task-1-forever"]
    [call] = deployment.calls()
    assert call.state == "unknown"


async def test_progress_reaches_the_run_and_the_lease_outlasts_the_wait(tmp_path: Path) -> None:
    deployment = await deploy(tmp_path)
    heard: list[CallProgress] = []

    async def listen(progress: CallProgress) -> None:
        heard.append(progress)

    async with deployment.engine() as engine:
        result = await engine.run(
            "from servers.tasks import slow_sum\nslow_sum(a=1, b=2)\n", on_call_progress=listen
        )
    assert result.status == "ok", result.error
    assert [p.progress for p in heard if p.progress is not None] == [1, 2, 3]
    assert {p.task_id for p in heard} == {"task-1-slow_sum"}
    assert heard[-1].status == "completed"
    assert "tasks/slow_sum: completed" in heard[-1].describe()
    [call] = deployment.calls()
    ledger = open_ledger(deployment.config.ledger_path, create=False)
    try:
        kinds = [e.kind for e in ledger.events(call.call_id)]
    finally:
        ledger.close()
    # A write may now wait up to the run's budget (600 s), past its 70 s lease: the lease is
    # extended before the wait, so recovery never mistakes the live call for a dead one.
    assert kinds == ["call_reserved", "call_sent", "lease_extended", "call_completed"]


async def test_a_task_that_asks_for_input_asks_the_runs_person_and_the_program_gets_the_end(
    tmp_path: Path,
) -> None:
    deployment = await deploy(tmp_path)
    asked: list[ElicitationRequest] = []

    async def person(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        return ElicitationAnswer("accept", {"account": "acme-42"}, answered_by="operator")

    program = "from servers.tasks import asks\nasks()\n"
    async with deployment.engine(elicitor=CallbackElicitor(person, name="operator")) as engine:
        result = await engine.run(program)

    assert result.status == "ok", result.error
    assert "charged acme-42" in str(result.result)
    [question] = asked
    assert (question.server, question.tool) == ("tasks", "asks")
    assert question.message == "Which account should be charged?"
    [call] = deployment.calls()
    assert (call.state, call.receipt) == ("succeeded", "task-1-asks")
