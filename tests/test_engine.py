"""The CodeMode engine (the Python API) on the real example servers, process backend."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from codemode import CodeMode, config_from_mapping
from codemode.catalog import approve, load_lock, observe, save_lock
from codemode.host import McpHost

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "servers"


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[CodeMode]:
    data: dict[str, Any] = {
        "servers": {
            name: {"command": sys.executable, "args": [str(EXAMPLES / f"{name}_server.py")], "trusted": True}
            for name in ("docs", "crm")
        },
        "sandbox": {"backend": "process", "pool_size": 1},
    }
    config = config_from_mapping(data, base_dir=tmp_path)
    async with McpHost(config) as host:
        lock = load_lock(config.lock_path)
        for catalog in host.catalogs():
            lock, _ = observe(lock, catalog)
        save_lock(config.lock_path, approve(lock)[0])
    async with CodeMode(config, measure_tokens=True) as cm:
        yield cm


async def test_resources_and_prompts_are_readable_from_a_program(engine: CodeMode) -> None:
    program = """
from servers.docs._resources import read_document
from servers.docs._prompts import summarize_document
text = read_document(doc_id="memo-2026-01-08-support-staffing-h1")[0].text
messages = summarize_document(doc_id="memo-2026-01-08-support-staffing-h1")
{"chars": len(text or ""), "roles": [m.role for m in messages]}
"""
    result = await engine.run(program)
    assert result.status == "ok", result.error
    assert isinstance(result.result, dict)
    assert result.result["roles"] == ["user"]


async def test_a_denial_is_a_typed_exception_and_the_program_goes_on(engine: CodeMode) -> None:
    program = """
import codemode
from servers.crm import add_note, get_customer
try:
    add_note(customer_id="CUST-0001", text="no approver here")
    outcome = "written"
except codemode.CallDenied as denied:
    outcome = f"{denied.gate}: {denied.reason}"
{"outcome": outcome, "still_running": get_customer(customer_id="CUST-0001")["customer_id"]}
"""
    result = await engine.run(program)
    assert result.status == "ok", result.error
    assert isinstance(result.result, dict)
    outcome = result.result["outcome"]
    assert isinstance(outcome, str)
    assert outcome.startswith("consent: needs approval")
    assert result.result["still_running"] == "CUST-0001"
    assert result.denials == 1
    assert result.calls == 1


async def test_tool_definitions_exist_for_each_model_api_and_tool_calls_dispatch(engine: CodeMode) -> None:
    openai = engine.tool_definition("openai")
    anthropic = engine.tool_definition("anthropic")
    mcp = engine.tool_definition("mcp")
    assert openai["function"]["name"] == anthropic["name"] == mcp["name"] == "run_code"
    assert anthropic["input_schema"]["required"] == ["code"]
    assert "crm (" in mcp["description"]
    reply = await engine.handle_tool_call("run_code", '{"code": "6 * 7"}')
    assert not reply.is_error
    assert reply.run is not None and reply.run.result == 42
    bad = await engine.handle_tool_call("run_code", "{not json")
    assert bad.is_error
    unknown = await engine.handle_tool_call("nope", {})
    assert unknown.is_error and "unknown tool" in unknown.text


async def test_token_measurement_counts_what_stayed_out_of_the_model_context(engine: CodeMode) -> None:
    program = "from servers.docs import get_sheet\nlen(get_sheet(sheet_id='sales-2026', limit=500)['rows'])"
    result = await engine.run(program)
    assert result.result == 500
    assert result.tool_result_tokens is not None and result.final_tokens is not None
    assert result.tool_result_tokens > 100 * result.final_tokens


async def test_importing_a_tool_that_does_not_exist_lists_the_servers_tools(engine: CodeMode) -> None:
    result = await engine.run("from servers.crm import get_custmer\n")
    assert result.status == "error" and result.error is not None
    message = result.error.message
    assert "servers.crm has no tool 'get_custmer'" in message
    assert "Did you mean get_customer" in message
    assert "Its tools:" in message and "add_note" in message
