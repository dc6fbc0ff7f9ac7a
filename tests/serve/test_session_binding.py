"""An MCP session (Streamable HTTP, 2025-11-25) belongs to the principal and tenant whose token
opened it: any other token gets 404 on POST, GET and DELETE, exactly as for a session that does
not exist; an approval given over the session names who gave it; ``-v`` logs no session id.

Driven over real HTTP against a real ``codemode serve --transport http`` with real tokens, the
way a second client that learnt Alice's ``Mcp-Session-Id`` would try it: answer her pending
approval question, read her stream, end her session.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from codemode.config import load_config
from codemode.ledger import open_ledger
from tests.serve.conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http
from tests.serve.test_serve import WRITE, http, text_of
from tests.serve.test_serve import answer as answer_with

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ALICE, BOB = TOKENS["alice"], TOKENS["bob"]
ALICE_GLOBEX = "alice-globex-token-0123456789abcdef"
"""Alice's principal, another tenant: a token of its own (a literal here; tests only)."""

ALICE_IN_GLOBEX = f"""
[policy.principals.alice]
tenants = ["acme", "globex"]
[serve.tokens.alice-globex]
token = "{ALICE_GLOBEX}"
principal = "alice"
tenant = "globex"
"""
PROTOCOL = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
APPROVER = 'mcp-client (principal "alice", tenant "acme")'


@pytest.fixture(scope="module")
def two_tenant_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    text = TOKENS_TOML.replace('[policy.principals.alice]\ntenants = ["acme"]\n', "")
    return make_workspace(tmp_path_factory.mktemp("sessions"), text + ALICE_IN_GLOBEX)


def headers(token: str | None, session: str | None = None) -> dict[str, str]:
    found = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": PROTOCOL}
    if token is not None:
        found["Authorization"] = f"Bearer {token}"
    if session is not None:
        found["Mcp-Session-Id"] = session
    return found


async def open_session(raw: httpx.AsyncClient, url: str, token: str) -> str:
    """initialize (declaring elicitation) and initialized: the session id the server issued."""
    hello: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "session-test", "version": "1"},
        },
    }
    opened = await raw.post(url, json=hello, headers=headers(token))
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await raw.post(url, json=done, headers=headers(token, session))).status_code == 202
    return session


async def messages(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE response, as they come."""
    async for line in response.aiter_lines():
        if line.startswith("data:") and line[5:].strip():
            yield json.loads(line[5:])


async def next_request(stream: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    async for message in stream:
        if "method" in message and "id" in message:
            return message
    raise AssertionError("the stream ended without a request from the server")


async def final_result(stream: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    async for message in stream:
        if "result" in message and "method" not in message:
            return message["result"]
    raise AssertionError("the stream ended without the tool's result")


def answer(question: dict[str, Any], approve: bool) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": question["id"],
        "result": {"action": "accept", "content": {"approve": approve}},
    }


def call(code: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "run_code", "arguments": {"code": code}},
    }


def approvers(workspace: Path) -> list[str]:
    """Who approved each call the ledger records as approved, oldest first."""
    location = load_config(workspace).ledger_location({})
    if not Path(location).exists():
        return []  # no server has run yet
    with open_ledger(location, create=False, recover=False) as ledger:
        calls = ledger.list_calls(newest_first=False)
        found = [ledger.get_approval(c.approval_id) for c in calls if c.approval_id is not None]
        assert ledger.verify().ok
    return [a.approver for a in found if a is not None]


async def refused_everywhere(raw: httpx.AsyncClient, url: str, session: str, reply: dict[str, Any]) -> None:
    """Every other token, and no token, is turned away from ``session``: POST (the answer to its
    question), GET (its stream) and DELETE (ending it)."""
    strangers = {"bob": BOB, "alice in globex": ALICE_GLOBEX, "no token": None}
    bodies: set[str] = set()
    for who, token in strangers.items():
        wanted = 401 if token is None else 404
        posted = await raw.post(url, json=reply, headers=headers(token, session))
        async with raw.stream("GET", url, headers=headers(token, session)) as got:
            pass  # the status is enough: an open stream would never end
        deleted = await raw.delete(url, headers=headers(token, session))
        statuses = (posted.status_code, got.status_code, deleted.status_code)
        assert statuses == (wanted, wanted, wanted), f"{who}: {statuses}"
        if token is not None:
            bodies.add(posted.text)
    unknown = await raw.post(url, json=reply, headers=headers(BOB, "0" * 32))
    assert unknown.status_code == 404 and bodies == {unknown.text}, "another's session looks unknown"


async def test_only_the_principal_and_tenant_that_opened_a_session_may_use_it(
    two_tenant_workspace: Path,
) -> None:
    before = approvers(two_tenant_workspace)
    with serving_http(two_tenant_workspace) as url:
        async with httpx.AsyncClient(timeout=60) as raw:
            session = await open_session(raw, url, ALICE)
            async with raw.stream("POST", url, json=call(WRITE), headers=headers(ALICE, session)) as running:
                stream = messages(running)
                question = await next_request(stream)
                assert question["method"] == "elicitation/create"
                assert "crm/add_note" in question["params"]["message"]
                await refused_everywhere(raw, url, session, answer(question, True))
                # Alice's own answer still counts: the session was not harmed by the attempts.
                mine = await raw.post(url, json=answer(question, True), headers=headers(ALICE, session))
                assert mine.status_code == 202
                result = await final_result(stream)
            assert not result.get("isError"), result
            ended = await raw.delete(url, headers=headers(ALICE, session))
            assert ended.status_code == 200, "Alice may end her own session"
    assert approvers(two_tenant_workspace)[len(before) :] == [APPROVER], "the approval names who answered"


async def test_an_approval_given_in_an_input_round_names_who_answered(two_tenant_workspace: Path) -> None:
    """2026-07-28: no session; the retry that carries the answer is taken only from the caller."""
    before = approvers(two_tenant_workspace)
    with serving_http(two_tenant_workspace) as url:
        options: dict[str, Any] = {"mode": "auto", "elicitation_callback": answer_with("accept")}
        async with Client(http(url, ALICE), **options) as client:
            assert client.protocol_version == "2026-07-28"
            result = await client.call_tool("run_code", {"code": WRITE})
    assert not result.is_error, text_of(result)
    assert approvers(two_tenant_workspace)[len(before) :] == [APPROVER]


async def test_a_denial_names_who_answered(two_tenant_workspace: Path) -> None:
    with serving_http(two_tenant_workspace) as url:
        async with httpx.AsyncClient(timeout=60) as raw:
            session = await open_session(raw, url, ALICE)
            async with raw.stream("POST", url, json=call(WRITE), headers=headers(ALICE, session)) as running:
                stream = messages(running)
                question = await next_request(stream)
                no = await raw.post(url, json=answer(question, False), headers=headers(ALICE, session))
                assert no.status_code == 202
                result = await final_result(stream)
    text = "\n".join(part["text"] for part in result["content"])
    assert result["isError"] and f"not given by {APPROVER}: the user did not approve" in text


async def test_verbose_logs_name_no_session_id(two_tenant_workspace: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with serving_http(two_tenant_workspace, "-v", stderr_copy=log) as url:
        async with httpx.AsyncClient(timeout=60) as raw:
            session = await open_session(raw, url, ALICE)
            listed: dict[str, Any] = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
            assert (await raw.post(url, json=listed, headers=headers(ALICE, session))).status_code == 200
            stranger = await raw.post(url, json=listed, headers=headers(BOB, session))
            assert stranger.status_code == 404
            assert (await raw.delete(url, headers=headers(ALICE, session))).status_code == 200
            stale = await raw.post(url, json=listed, headers=headers(ALICE, session))
            assert stale.status_code == 404, "an ended session is gone"
    text = log.read_text(encoding="utf-8")
    assert "INFO" in text, "-v logs"
    assert session not in text and session[:16] not in text
