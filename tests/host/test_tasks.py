"""Long-running calls: a tool that answers with an MCP task (2025-11-25) is followed to its end.

The server is a real process (``tests/fixtures/servers/tasks_server.py``: over stdio, and over
Streamable HTTP where the transport matters) whose tasks advance one step per poll; what it was
asked (``tools/call`` with a ``task``, ``tasks/get``, ``tasks/cancel``...) is read from its log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest

from codemode.broker._receipts import TASK_META_KEY as RECEIPT_KEY
from codemode.broker._receipts import find_receipt
from codemode.calls import SendOptions
from codemode.config import config_from_mapping
from codemode.errors import OutcomeUnknownError, ServerRejectedError
from codemode.host import ConnectionState, McpHost
from codemode.host._tasks import TASK_META_KEY, CallProgress
from tests.conftest import HttpServers

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "tasks_server.py"


class Served:
    def __init__(self, log: Path) -> None:
        self.log = log

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]

    def methods(self, *names: str) -> list[str]:
        return [r["method"] for r in self.requests() if r.get("method") in names]


def tasks_host(
    tmp_path: Path, *flags: str, http: HttpServers | None = None, **server: Any
) -> tuple[McpHost, Served]:
    log = tmp_path / "tasks.jsonl"
    args = [str(SERVER), "--log", str(log), *flags]
    where: dict[str, Any] = (
        {"command": sys.executable, "args": args}
        if http is None
        else {"url": http.start_script(SERVER, *args[1:], "--http"), "allow_loopback": True}
    )
    entry = {**where, "protocol": "legacy", "call_timeout": 10, **server}
    return McpHost(config_from_mapping({"servers": {"tasks": entry}})), Served(log)


@pytest.fixture(params=["stdio", "http"])
def over(request: pytest.FixtureRequest, http_servers: HttpServers) -> HttpServers | None:
    """The transport of a test that runs on both: None for stdio, else the HTTP launcher."""
    return http_servers if request.param == "http" else None


async def wait_for(predicate: Any) -> None:
    with anyio.fail_after(15):
        while not predicate():
            await anyio.sleep(0.01)


async def test_a_task_is_polled_until_done_and_its_progress_is_heard(
    tmp_path: Path, over: HttpServers | None
) -> None:
    host, served = tasks_host(tmp_path, http=over)
    heard: list[CallProgress] = []

    async def listen(event: CallProgress) -> None:
        heard.append(event)

    async with host:
        result = await host.connection("tasks").call_tool(
            "slow_sum", {"a": 2, "b": 3}, SendOptions(on_progress=listen)
        )
    assert not result.is_error
    assert result.structured_content == {"sum": 5}
    task_id = result.meta[TASK_META_KEY]["taskId"] if result.meta else None
    assert task_id == "task-1-slow_sum"
    assert find_receipt(result) == task_id, "the task id is the ledger's receipt"
    [call] = [r for r in served.requests() if r["method"] == "tools/call"]
    assert call["task"]["ttl"] > 0, "the call asked for a task"
    assert served.methods("tasks/get", "tasks/result") == ["tasks/get"] * 3 + ["tasks/result"]
    assert [(e.status, e.progress) for e in heard] == [
        ("working", None),
        (None, 1.0),
        (None, 2.0),
        (None, 3.0),
        ("completed", None),
    ]
    assert {(e.server, e.tool, e.task_id) for e in heard} == {("tasks", "slow_sum", task_id)}
    assert heard[1].total == 3.0 and heard[1].message == "step 1 of 3"


@pytest.mark.integration
async def test_a_failed_task_is_the_tools_error_result_with_its_task_as_receipt(tmp_path: Path) -> None:
    host, _ = tasks_host(tmp_path)
    async with host:
        result = await host.connection("tasks").call_tool("doomed", {})
    assert result.is_error
    assert [getattr(b, "text", None) for b in result.content] == ["the disk is full"]
    assert find_receipt(result) == "task-1-doomed"


@pytest.mark.integration
async def test_an_optional_task_tool_is_called_plainly(tmp_path: Path) -> None:
    host, served = tasks_host(tmp_path)
    async with host:
        result = await host.connection("tasks").call_tool("quick", {"x": 4})
    assert [getattr(b, "text", None) for b in result.content] == ["8"]
    [call] = [r for r in served.requests() if r["method"] == "tools/call"]
    assert "task" not in call
    assert find_receipt(result) is None, "a server cannot plant the host's task receipt"
    assert not result.meta


@pytest.mark.integration
async def test_without_the_servers_task_capability_no_task_is_asked_for(tmp_path: Path) -> None:
    host, served = tasks_host(tmp_path, "--no-task-capability")
    async with host:
        with pytest.raises(ServerRejectedError, match="must be called as a task"):
            await host.connection("tasks").call_tool("slow_sum", {"a": 1, "b": 1})
    [call] = [r for r in served.requests() if r["method"] == "tools/call"]
    assert "task" not in call


async def test_the_time_limit_ends_polling_and_cancels_the_task(
    tmp_path: Path, over: HttpServers | None
) -> None:
    host, served = tasks_host(tmp_path, http=over)
    async with host:
        with pytest.raises(OutcomeUnknownError, match=r"task-1-forever: not finished in") as caught:
            await host.connection("tasks").call_tool("forever", {}, SendOptions(time_limit_s=1.0))
        assert "tasks/cancel was sent and acknowledged" in caught.value.reason
    assert served.methods("tasks/cancel") == ["tasks/cancel"]
    assert [r.get("taskId") for r in served.requests() if r["method"] == "tasks/cancel"] == ["task-1-forever"]


@pytest.mark.integration
async def test_call_timeout_is_the_default_time_limit(tmp_path: Path) -> None:
    # A limit that the first tools/call answers within even on a loaded machine: else the call
    # itself times out, which is another failure than the one tested here.
    host, served = tasks_host(tmp_path, call_timeout=1.0)
    async with host:
        with pytest.raises(OutcomeUnknownError, match=r"in the time allowed \(1 s\)"):
            await host.connection("tasks").call_tool("forever", {})
    assert served.methods("tasks/cancel") == ["tasks/cancel"]


async def test_cancelling_the_caller_cancels_the_task(tmp_path: Path, over: HttpServers | None) -> None:
    host, served = tasks_host(tmp_path, http=over)
    async with host:
        connection = host.connection("tasks")
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await connection.call_tool("forever", {})
                raise AssertionError("the call returned")

            tg.start_soon(call)
            await wait_for(lambda: len(served.methods("tasks/get")) >= 2)
            tg.cancel_scope.cancel()
        assert served.methods("tasks/cancel") == ["tasks/cancel"]
        assert connection.state is ConnectionState.READY, "a cancelled call leaves the connection up"
        result = await connection.call_tool("quick", {"x": 1})
        assert not result.is_error


async def test_a_server_crash_mid_task_is_an_unknown_outcome_never_retried(
    tmp_path: Path, over: HttpServers | None
) -> None:
    host, served = tasks_host(tmp_path, http=over)
    async with host:
        with pytest.raises(OutcomeUnknownError, match="task-1-crash: lost") as caught:
            await host.connection("tasks").call_tool("crash", {})
        assert "it may have executed" in caught.value.reason
        assert host.connection("tasks").state is not ConnectionState.READY
    assert served.methods("tools/call") == ["tools/call"], "never sent again"
    assert [r.get("event") for r in served.requests() if "event" in r] == ["crashing"]


class Answers:
    """The run's person, as the broker's input handler for one call: answers each question."""

    def __init__(self, answer: mcp_types.ElicitResult) -> None:
        self.answer = answer
        self.asked: list[mcp_types.ElicitRequestParams] = []

    async def elicit(self, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        self.asked.append(params)
        return self.answer


@pytest.mark.integration
async def test_a_task_that_asks_for_input_gets_its_answer_from_the_runs_person(tmp_path: Path) -> None:
    host, served = tasks_host(tmp_path)
    person = Answers(mcp_types.ElicitResult(action="accept", content={"account": "acme-42"}))
    async with host:
        result = await host.connection("tasks").call_tool("asks", {}, SendOptions(inputs=person))

    assert not result.is_error
    assert [block.text for block in result.content if isinstance(block, mcp_types.TextContent)] == [
        "charged acme-42"
    ]
    (question,) = person.asked
    assert isinstance(question, mcp_types.ElicitRequestFormParams)
    assert question.message == "Which account should be charged?"
    assert result.meta is not None and result.meta[TASK_META_KEY]["status"] == "completed"
    assert served.methods("tasks/cancel") == [], "the task was answered, not cancelled"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("person", "told"),
    [(None, "error"), (Answers(mcp_types.ElicitResult(action="decline")), "decline")],
    ids=["nobody to ask", "declined"],
)
async def test_a_task_that_asks_where_nobody_answers_ends_as_the_tools_error(
    tmp_path: Path, person: Answers | None, told: str
) -> None:
    host, served = tasks_host(tmp_path)
    async with host:
        result = await host.connection("tasks").call_tool("asks", {}, SendOptions(inputs=person))

    assert result.is_error
    text = "".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))
    assert text == f"no account given ({told})"
    assert [r["event"] for r in served.requests() if "event" in r] == ["asked", "answered"]


@pytest.mark.integration
async def test_a_failing_progress_listener_does_not_fail_the_call(tmp_path: Path) -> None:
    host, _ = tasks_host(tmp_path)

    async def broken(event: CallProgress) -> None:
        raise RuntimeError("listener bug")

    async with host:
        result = await host.connection("tasks").call_tool(
            "slow_sum", {"a": 1, "b": 1}, SendOptions(on_progress=broken)
        )
    assert result.structured_content == {"sum": 2}


def test_the_broker_reads_the_key_the_host_writes() -> None:
    assert RECEIPT_KEY == TASK_META_KEY
