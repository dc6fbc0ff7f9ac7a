"""`codemode serve` relays a downstream server's request for input to its MCP client's user.

The downstream server (``tests/fixtures/servers/guarded_server.py``) asks to confirm a deletion
in the middle of a tool call. The question reaches the client that asked for the run, in both
eras: an ``elicitation/create`` on 2025-11-25, an input round of ``run_code`` on 2026-07-28.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.serve.conftest import TOKENS_TOML, make_workspace, serving_http
from tests.serve.test_serve import http, text_of

pytestmark = pytest.mark.anyio

GUARDED = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "guarded_server.py"
DELETE = "from servers.guarded import delete_customer\ndelete_customer(customer_id='CUST-7')['result']\n"


@pytest.fixture(scope="module")
def guarded_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("relay")
    extra = f"""
[servers.guarded]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(GUARDED))}]
env = {{ GUARDED_LOG = {json.dumps(str(directory / "deletions.jsonl"))} }}
trusted = true

[policy.consent]
never = ["guarded/*"]
"""
    return make_workspace(directory, TOKENS_TOML + extra)


@pytest.fixture(scope="module")
def relay_url(guarded_workspace: Path) -> Iterator[str]:
    with serving_http(guarded_workspace) as url:
        yield url


def deletions(workspace: Path) -> list[dict[str, Any]]:
    log = workspace.parent / "deletions.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_the_clients_user_answers_the_downstream_servers_question(
    relay_url: str, guarded_workspace: Path, mode: str, action: str
) -> None:
    asked: list[mcp_types.ElicitRequestParams] = []

    async def person(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params)
        content = {"confirm": True, "reason": f"relayed {mode}"} if action == "accept" else None
        return mcp_types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    before = len(deletions(guarded_workspace))
    async with Client(http(relay_url), mode=mode, elicitation_callback=person) as client:
        result = await client.call_tool("run_code", {"code": DELETE})
    text = text_of(result)
    assert not result.is_error, text
    [question] = asked
    assert "'guarded' asks, during its tool delete_customer" in question.message
    assert "Delete customer CUST-7?" in question.message
    assert isinstance(question, mcp_types.ElicitRequestFormParams)
    assert set(question.requested_schema["properties"]) == {"confirm", "reason"}
    done = deletions(guarded_workspace)[before:]
    if action == "accept":
        assert done == [{"customer_id": "CUST-7", "reason": f"relayed {mode}"}]
        assert f"deleted CUST-7 (relayed {mode})" in text
    else:
        assert done == []
        assert "not deleted: the user's answer was decline" in text


async def test_a_client_that_cannot_be_asked_deletes_nothing(relay_url: str, guarded_workspace: Path) -> None:
    before = len(deletions(guarded_workspace))
    async with Client(http(relay_url), mode="legacy") as client:  # no elicitation capability
        result = await client.call_tool("run_code", {"code": DELETE})
    assert deletions(guarded_workspace)[before:] == []
    assert "not deleted: the user's answer was cancel" in text_of(result)
