"""Long-running calls on 2026-07-28 end to end: a program's stub call that the server makes a task
(the ``io.modelcontextprotocol/tasks`` extension), through the broker.

The server is a real process over Streamable HTTP (``tests/fixtures/servers/tasks_ext_server.py``);
the program runs in the in-process sandbox. What the server was asked is read from its log, what
codemode recorded from the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codemode import CallbackElicitor, CodeMode, ElicitationAnswer, ElicitationRequest
from codemode.testing import in_process_sandbox
from tests._fixture_server import FixtureServer, deploy_fixture_server
from tests.conftest import HttpServers
from tests.test_engine_tasks import cancel_a_run_mid_task

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SERVER = Path(__file__).resolve().parent / "fixtures" / "servers" / "tasks_ext_server.py"


@dataclass
class Deployment(FixtureServer):
    def engine(self, **options: Any) -> CodeMode:
        return super().engine(sandbox_backend=in_process_sandbox(), **options)


async def deploy(tmp_path: Path, http_servers: HttpServers) -> Deployment:
    log = "tasks.jsonl"
    url = http_servers.start_script(SERVER, "--log", str(tmp_path / log))
    return await deploy_fixture_server(
        Deployment, tmp_path, "tasks", SERVER, log=log, url=url, protocol="2026-07-28", call_timeout=10
    )


async def test_a_task_that_asks_for_input_asks_the_runs_person_and_the_answer_goes_by_tasks_update(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    deployment = await deploy(tmp_path, http_servers)
    asked: list[ElicitationRequest] = []

    async def person(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        return ElicitationAnswer("accept", {"account": "acme-42"}, answered_by="operator")

    async with deployment.engine(elicitor=CallbackElicitor(person, name="operator")) as engine:
        result = await engine.run("from servers.tasks import asks\nasks()\n")

    assert result.status == "ok", result.error
    assert "charged acme-42" in str(result.result)
    [question] = asked
    assert (question.server, question.tool) == ("tasks", "asks")
    assert question.message == "Which account should be charged?"
    [update] = deployment.requests("tasks/update")
    assert update["inputResponses"]["account-task-1-asks"]["content"] == {"account": "acme-42"}
    [call] = deployment.calls()
    assert (call.state, call.receipt) == ("succeeded", "task-1-asks")


async def test_cancelling_the_run_cancels_the_task_and_the_call_is_unknown(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    await cancel_a_run_mid_task(await deploy(tmp_path, http_servers))
