"""Why a call was denied or failed reaches the program through the result filter: a gate that
quotes an argument must not undo a PII placeholder, and a server's error text must not carry a
secret or PII past the filters its answers go through."""

from __future__ import annotations

from typing import Any, cast

import mcp_types
import pytest

from codemode.broker import Broker
from codemode.calls import (
    PLAIN_CALL,
    CallDenied,
    CallFailed,
    RunBinding,
    SendOptions,
    ToolCallRequest,
    ToolResult,
)
from codemode.errors import OutcomeUnknownError, ServerRejectedError, ServerUnavailableError
from codemode.testing import FakeTools, fake_broker, open_test_run

pytestmark = pytest.mark.anyio

READ = {"readOnlyHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": False}
EMAIL = "ana.secret@example.com"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
ERROR_TEXT = f"invalid params: row {{email: {EMAIL}}} key {AWS_KEY}"


def request(tools: FakeTools, tool: str, seq: int, **arguments: Any) -> ToolCallRequest:
    spec = tools.live_tool("crm", tool)
    assert spec is not None
    return ToolCallRequest(
        seq=seq, server="crm", tool=tool, schema_hash=spec.schema_hash, arguments=arguments
    )


def crm() -> FakeTools:
    tools = FakeTools(trusted=frozenset({"crm"}))
    tools.add("crm", "find", lambda _: {"email": EMAIL}, annotations=READ)
    id_only = {
        "type": "object",
        "properties": {"customer_id": {"type": "string", "pattern": "^CUST-[0-9]{4}$"}},
    }
    tools.add("crm", "get", lambda a: a, annotations=READ, input_schema=id_only)
    repo = {"type": "object", "properties": {"repo": {"type": "string"}}}
    tools.add("crm", "open", lambda a: a, annotations=READ, input_schema=repo)
    return tools


async def placeholder_and_broker(
    policy: dict[str, Any] | None = None,
) -> tuple[Broker, RunBinding, FakeTools, str]:
    tools = crm()
    broker = fake_broker(tools, policy=policy)
    binding, _ = open_test_run(broker)
    found = await broker.call_tool(binding, request(tools, "find", 1))
    assert isinstance(found, ToolResult)
    token = cast(dict[str, str], found.structured)["email"]
    assert token.startswith("<pii:email:")
    return broker, binding, tools, token


async def test_a_schema_denial_quotes_the_placeholder_not_the_value_behind_it() -> None:
    broker, binding, tools, token = await placeholder_and_broker()
    denied = await broker.call_tool(binding, request(tools, "get", 2, customer_id=token))
    assert isinstance(denied, CallDenied) and denied.gate == "arguments"
    assert EMAIL not in denied.reason and token in denied.reason


async def test_a_scope_denial_quotes_the_placeholder_not_the_value_behind_it() -> None:
    scope = {"tools": ["crm/open"], "argument": "repo", "allow": ["acme/*"]}
    policy = {"mode": "deny", "principals": {"local": {"tools": ["crm/*"], "scopes": [scope]}}}
    broker, binding, tools, token = await placeholder_and_broker(policy)
    denied = await broker.call_tool(binding, request(tools, "open", 2, repo=token))
    assert isinstance(denied, CallDenied) and denied.gate == "resource"
    assert EMAIL not in denied.reason


class Failing(FakeTools):
    """Every call ends in the error ``failure``, as a host would raise it."""

    failure: Exception = RuntimeError()

    async def call_tool(
        self, server: str, tool: str, arguments: dict[str, Any], options: SendOptions = PLAIN_CALL
    ) -> mcp_types.CallToolResult:
        raise self.failure


async def failures_of_a_read_and_a_write(failure: Exception) -> list[CallFailed]:
    """What a program gets when a read and then a write both end in ``failure``."""
    tools = Failing(trusted=frozenset({"crm"}))
    tools.failure = failure
    tools.add("crm", "get", lambda _: "x", annotations=READ)
    tools.add("crm", "put", lambda _: "x", annotations=WRITE)
    broker = fake_broker(tools, policy={"consent": {"never": ["crm/put"]}})
    binding, _ = open_test_run(broker)
    failed: list[CallFailed] = []
    for seq, tool in enumerate(("get", "put"), start=1):
        outcome = await broker.call_tool(binding, request(tools, tool, seq))
        assert isinstance(outcome, CallFailed), outcome
        failed.append(outcome)
    return failed


@pytest.mark.parametrize(
    "failure",
    [
        ServerRejectedError("crm", "get", -32602, ERROR_TEXT),
        OutcomeUnknownError("crm", "get", f"server error -32603: {ERROR_TEXT}; it may have executed"),
    ],
    ids=["rejected", "unknown"],
)
async def test_a_servers_error_text_is_filtered_on_reads_and_writes(failure: Exception) -> None:
    for failed in await failures_of_a_read_and_a_write(failure):
        assert EMAIL not in failed.reason and AWS_KEY not in failed.reason, failed.reason
        assert "<pii:email:" in failed.reason and "invalid params" in failed.reason, "the rest is kept"


async def test_a_down_servers_stderr_reaches_the_logs_not_the_program() -> None:
    """A server's stderr may quote anything it handled, for any tenant: a program (of whichever
    tenant) is told the server is down, and the host's operators get the lines."""
    tail = "ERROR sync failed for tenant acme: invoice INV-7781 of customer 'Globex Ltd'"
    down = ServerUnavailableError("crm", "npx crm-server", "not connected (failed: exited 1)", tail)
    for failed in await failures_of_a_read_and_a_write(down):
        assert "not connected (failed: exited 1)" in failed.reason and "Globex" not in failed.reason
    assert tail in str(down), "the whole message, for logs, keeps it"
