"""Which call an HTTP 401/403/429/503 refused (read from the request body), and what it tells the person."""

from __future__ import annotations

import json

import httpx2
import pytest

from codemode.config import HttpServerConfig, OAuthSettings
from codemode.host._http import CALL_MARKER, Refusals, call_marker, refusal_reason


def test_the_marker_is_read_from_the_requests_meta() -> None:
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"_meta": {CALL_MARKER: "ab" * 16}}}
    assert call_marker(json.dumps(body).encode()) == "ab" * 16


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"params": []}',
        b'{"params": {"_meta": "x"}}',
        b'{"params": {"_meta": {"io.codemode/call": 7}}}',
        # The marker text inside an argument is not the marker: only params._meta counts.
        json.dumps({"params": {"arguments": {"note": f'"{CALL_MARKER}": "{"cd" * 16}"'}}}).encode(),
    ],
)
def test_anything_else_has_no_marker(body: bytes) -> None:
    assert call_marker(body) is None


def _answer(status: int, marker: str | None, retry_after: str | None = None) -> httpx2.Response:
    meta = {"_meta": {CALL_MARKER: marker}} if marker else {}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": meta}).encode()
    request = httpx2.Request("POST", "https://mcp.example.test/mcp", content=body)
    headers = [(b"retry-after", retry_after.encode())] if retry_after else []  # bytes, as sent: any text
    return httpx2.Response(status, headers=headers, request=request)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "retry_after", "recorded"),
    [
        (401, None, (401, None)),
        (403, None, (403, None)),
        (429, "7", (429, 7.0)),
        (503, "999", (503, 30.0)),
        # Digits that are not ASCII, and a date (which codemode does not read): no delay, no crash.
        (429, "²", (429, None)),
        (429, "٣", (429, None)),
        (503, "Wed, 21 Oct 2026 07:28:00 GMT", (503, None)),
    ],
)
async def test_refusing_answers_are_remembered_per_call(
    status: int, retry_after: str | None, recorded: tuple[int, float | None]
) -> None:
    refusals = Refusals()
    await refusals.on_response(_answer(status, "ab" * 16, retry_after))
    assert refusals.pop("ab" * 16) == recorded
    assert refusals.pop("ab" * 16) is None, "popped once: a marker never outlives its call"


@pytest.mark.anyio
async def test_other_answers_and_unmarked_requests_are_not_refusals() -> None:
    refusals = Refusals()
    await refusals.on_response(_answer(200, "ab" * 16))
    await refusals.on_response(_answer(500, "cd" * 16))
    await refusals.on_response(_answer(401, None))
    assert refusals.pop("ab" * 16) is None and refusals.pop("cd" * 16) is None


def test_an_auth_refusal_says_which_command_fixes_it() -> None:
    oauth = HttpServerConfig(url="https://mcp.example.test/mcp", oauth=OAuthSettings())
    static = HttpServerConfig(url="https://mcp.example.test/mcp")
    assert "run `codemode auth login tracker`" in refusal_reason("tracker", oauth, 403)
    assert "check [servers.tracker] headers" in refusal_reason("tracker", static, 401)
    assert refusal_reason("tracker", oauth, 429) == "HTTP 429"
