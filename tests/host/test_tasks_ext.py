"""Long-running calls on 2026-07-28: the ``io.modelcontextprotocol/tasks`` extension (SEP-2663).

The server is a real process over Streamable HTTP (``tests/fixtures/servers/tasks_ext_server.py``)
whose tasks advance one step per poll, and which creates a task only for a request that declares
the extension; what it was asked (and whether each request declared it) is read from its log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import mcp_types
import pytest

from codemode.broker._receipts import find_receipt
from codemode.calls import CallProgress, SendOptions
from codemode.config import config_from_mapping
from codemode.errors import OutcomeUnknownError, ServerRejectedError
from codemode.host import McpHost
from codemode.host._tasks import TASK_META_KEY
from tests.conftest import HttpServers

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "tasks_ext_server.py"
EXTENSION = "io.modelcontextprotocol/tasks"


class Served:
    def __init__(self, log: Path) -> None:
        self.log = log

    def requests(self, *methods: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        logged = [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]
        return [r for r in logged if not methods or r["method"] in methods]

    def methods(self, *names: str) -> list[str]:
        return [r["method"] for r in self.requests(*names)]


def ext_host(
    tmp_path: Path,
    http: HttpServers,
    protocol: Literal["2026-07-28", "legacy"] = "2026-07-28",
    **server: Any,
) -> tuple[McpHost, Served]:
    log = tmp_path / "tasks.jsonl"
    url = http.start_script(SERVER, "--log", str(log))
    entry = {"url": url, "allow_loopback": True, "protocol": protocol, "call_timeout": 10, **server}
    return McpHost(config_from_mapping({"servers": {"tasks": entry}})), Served(log)


def texts(result: mcp_types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]


class Answers:
    """The run's person, as the broker's input handler for one call: answers each question."""

    def __init__(self, answer: mcp_types.ElicitResult) -> None:
        self.answer = answer
        self.asked: list[mcp_types.ElicitRequestParams] = []

    async def elicit(self, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        self.asked.append(params)
        return self.answer


async def test_a_task_handle_is_polled_until_done_and_the_result_inline_is_the_answer(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    host, served = ext_host(tmp_path, http_servers)
    heard: list[CallProgress] = []

    async def listen(event: CallProgress) -> None:
        heard.append(event)

    async with host:
        connection = host.connection("tasks")
        assert host.long_running("tasks", "quick"), "any call of this server may become a task"
        result = await connection.call_tool("slow_sum", {"a": 2, "b": 3}, SendOptions(on_progress=listen))

    assert not result.is_error
    assert result.structured_content == {"sum": 5}
    assert result.meta is not None and result.meta[TASK_META_KEY] == {
        "taskId": "task-1-slow_sum",
        "status": "completed",
    }
    assert find_receipt(result) == "task-1-slow_sum", "the task id is the ledger's receipt"
    assert (
        served.methods("tools/call", "tasks/get", "tasks/update", "tasks/cancel")
        == ["tools/call"] + ["tasks/get"] * 3
    ), "polled until completed, the result read inline (no tasks/result)"
    assert {r["mcpName"] for r in served.requests("tasks/get")} == {"task-1-slow_sum"}, (
        "each tasks/* request names its task in Mcp-Name, for routing"
    )
    assert [e.status for e in heard if e.status] == ["working", "completed"]
    assert {e.task_id for e in heard} == {"task-1-slow_sum"}


async def test_the_extension_is_declared_on_every_request_of_a_2026_connection(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    host, served = ext_host(tmp_path, http_servers)
    async with host:
        result = await host.connection("tasks").call_tool("quick", {"x": 4})
    assert texts(result) == ["8"]
    assert find_receipt(result) is None, "a plain answer has no task"
    asked = served.requests("server/discover", "tools/list", "tools/call")
    assert {r["method"] for r in asked} == {"server/discover", "tools/list", "tools/call"}
    assert all(r["declared"] for r in asked)


async def test_a_legacy_connection_declares_no_extension_and_gets_no_task(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    host, served = ext_host(tmp_path, http_servers, protocol="legacy")
    async with host:
        assert not host.long_running("tasks", "slow_sum")
        with pytest.raises(ServerRejectedError, match="Missing required client capability"):
            await host.connection("tasks").call_tool("slow_sum", {"a": 1, "b": 1})
    [handshake] = served.requests("initialize")
    assert handshake["declared"] is False, "2025-11-25 has no extensions to declare"
    assert [r["declared"] for r in served.requests("tools/call")] == [False]
    assert served.methods("tasks/get") == []


async def test_a_failed_task_is_the_tools_error_with_its_task_as_receipt(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    host, _ = ext_host(tmp_path, http_servers)
    async with host:
        result = await host.connection("tasks").call_tool("doomed", {})
    assert result.is_error
    assert texts(result) == ["the task failed: the disk is full (error -32603)"]
    assert find_receipt(result) == "task-1-doomed"
    assert result.meta is not None and result.meta[TASK_META_KEY]["status"] == "failed"


async def test_the_time_limit_cancels_the_task_and_the_outcome_is_unknown_naming_it(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    host, served = ext_host(tmp_path, http_servers)
    async with host:
        with pytest.raises(OutcomeUnknownError, match=r"task task-1-forever: not finished in") as caught:
            await host.connection("tasks").call_tool("forever", {}, SendOptions(time_limit_s=1.0))
    assert "tasks/cancel was sent and acknowledged" in caught.value.reason
    [cancel] = served.requests("tasks/cancel")
    assert (cancel["taskId"], cancel["mcpName"], cancel["declared"]) == ("task-1-forever",) * 2 + (True,)
    assert len(served.methods("tasks/get")) >= 1


async def test_input_the_task_asks_for_comes_from_the_runs_person_through_tasks_update(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    host, served = ext_host(tmp_path, http_servers)
    person = Answers(mcp_types.ElicitResult(action="accept", content={"account": "acme-42"}))
    async with host:
        result = await host.connection("tasks").call_tool("asks", {}, SendOptions(inputs=person))

    assert not result.is_error
    assert texts(result) == ["charged acme-42"]
    [question] = person.asked
    assert isinstance(question, mcp_types.ElicitRequestFormParams)
    assert question.message == "Which account should be charged?"
    [update] = served.requests("tasks/update")
    assert update["inputResponses"] == {
        "account-task-1-asks": {"action": "accept", "content": {"account": "acme-42"}}
    }
    assert update["mcpName"] == "task-1-asks"
    assert find_receipt(result) == "task-1-asks"
    assert served.methods("tasks/cancel") == []


@pytest.mark.parametrize(
    "person",
    [None, Answers(mcp_types.ElicitResult(action="decline"))],
    ids=["nobody to ask", "the person declines"],
)
async def test_a_task_asking_where_nobody_answers_is_declined(
    tmp_path: Path, http_servers: HttpServers, person: Answers | None
) -> None:
    host, served = ext_host(tmp_path, http_servers)
    async with host:
        result = await host.connection("tasks").call_tool("asks", {}, SendOptions(inputs=person))

    assert result.is_error
    assert texts(result) == ["no account given (decline)"]
    assert [r["inputResponses"] for r in served.requests("tasks/update")] == [
        {"account-task-1-asks": {"action": "decline"}}
    ]
    assert served.methods("tasks/cancel") == []


async def test_a_task_asking_for_what_may_not_be_given_is_cancelled_and_its_outcome_unknown(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    # sampling = "deny" (the default): a request for a completion cannot be declined like a
    # question, and the task cannot go on without it.
    host, served = ext_host(tmp_path, http_servers)
    async with host:
        with pytest.raises(OutcomeUnknownError, match=r"task task-1-drafts: asked for sampling") as caught:
            await host.connection("tasks").call_tool("drafts", {})
    assert "tasks/cancel was sent and acknowledged" in caught.value.reason
    assert [r["taskId"] for r in served.requests("tasks/cancel")] == ["task-1-drafts"]
    assert served.methods("tasks/update") == []
