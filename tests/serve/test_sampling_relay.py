"""`codemode serve` relays a downstream server's request for a completion to its client's model.

The downstream server (``tests/fixtures/servers/sampling_server.py``, ``sampling = "relay"``)
asks for a completion in the middle of a tool call. The request reaches the client that asked
for the run, filtered, in both eras: a ``sampling/createMessage`` on 2025-11-25, an input round
of ``run_code`` on 2026-07-28.
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

from codemode.ledger import CallRecord, open_ledger
from codemode.serve._consent import RELAYED_META
from tests.host.test_sampling import SECRET, summarise
from tests.serve.conftest import TOKENS_TOML, make_workspace, serving_http
from tests.serve.test_serve import http, text_of

pytestmark = pytest.mark.anyio

SAMPLER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "sampling_server.py"
MODES = ["auto", "legacy"]  # auto negotiates 2026-07-28 with codemode serve


@pytest.fixture(scope="module")
def sampling_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("sampling-relay")
    extra = f"""
[servers.sampler]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SAMPLER))}]
env = {{ SAMPLING_LOG = {json.dumps(str(directory / "completions.jsonl"))} }}
trusted = true
sampling = "relay"

[policy.consent]
never = ["sampler/*"]
"""
    return make_workspace(directory, TOKENS_TOML + extra)


@pytest.fixture(scope="module")
def relay_url(sampling_workspace: Path) -> Iterator[str]:
    with serving_http(sampling_workspace) as url:
        yield url


def received(workspace: Path) -> list[dict[str, Any]]:
    log = workspace.parent / "completions.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def calls(workspace: Path, result: mcp_types.CallToolResult) -> list[CallRecord]:
    summary: dict[str, Any] = dict(result.structured_content or {})
    ledger = open_ledger(workspace.parent / "codemode.db", create=False)
    try:
        return ledger.list_calls(run_id=str(summary["run_id"]), newest_first=False)
    finally:
        ledger.close()


class Model:
    """The MCP client's model: answers every request with one line, and keeps what it was asked."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.asked: list[mcp_types.CreateMessageRequestParams] = []

    async def __call__(
        self, context: Any, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult:
        self.asked.append(params)
        content = mcp_types.TextContent(type="text", text=self.reply)
        return mcp_types.CreateMessageResult(role="assistant", content=content, model="client-model")


@pytest.mark.parametrize("mode", MODES)
async def test_the_clients_model_answers_the_downstream_servers_request(
    relay_url: str, sampling_workspace: Path, mode: str
) -> None:
    model = Model(f"Deploy token leaked ({mode}).")
    before = len(received(sampling_workspace))
    text = f"Bob pasted {SECRET} into the ticket."
    async with Client(http(relay_url), mode=mode, sampling_callback=model) as client:
        result = await client.call_tool("run_code", {"code": summarise(text)})
    output = text_of(result)
    assert not result.is_error, output
    assert f"summary: Deploy token leaked ({mode})." in output
    assert received(sampling_workspace)[before:] == [
        {"text": f"Deploy token leaked ({mode}).", "model": "client-model"}
    ]
    [params] = model.asked
    assert params.system_prompt == "You write one-line summaries."
    asked = json.dumps(params.model_dump(mode="json", by_alias=True))
    assert SECRET not in asked and "[REDACTED:github_token]" in asked, "filtered before the client"
    [call] = calls(sampling_workspace, result)
    if mode == "legacy":  # 2026-07-28 has no _meta on a request embedded in an input round
        relayed = (params.meta or {}).get(RELAYED_META)
        assert relayed == {"server": "sampler", "tool": "summarise", "call_id": call.call_id}
    [entry] = call.inputs
    answered = ("sampling", "accept", 'mcp-client (principal "alice", tenant "acme")')
    assert (entry["kind"], entry["action"], entry["answered_by"]) == answered
    assert entry["model"] == "client-model" and entry["filtered"]["secrets_redacted"] == 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_request_over_the_budget_never_reaches_the_client(
    relay_url: str, sampling_workspace: Path, mode: str
) -> None:
    model = Model("never")
    before = len(received(sampling_workspace))
    code = summarise("Anything.", max_tokens=100_000)  # more than the run's 20,000 tokens
    async with Client(http(relay_url), mode=mode, sampling_callback=model) as client:
        result = await client.call_tool("run_code", {"code": code})
    assert model.asked == []
    assert received(sampling_workspace)[before:] == []
    assert "sampling budget" in text_of(result)
    [call] = calls(sampling_workspace, result)
    assert [(e["action"], e["answered_by"]) for e in call.inputs] == [("refused", "host")]


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_sample_gets_nothing_asked_and_the_server_no_completion(
    relay_url: str, sampling_workspace: Path, mode: str
) -> None:
    before = len(received(sampling_workspace))
    async with Client(http(relay_url), mode=mode) as client:  # no sampling capability
        result = await client.call_tool("run_code", {"code": summarise("Anything.")})
    assert received(sampling_workspace)[before:] == []
    assert "the MCP client does not support sampling" in text_of(result)
