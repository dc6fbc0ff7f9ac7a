"""Which call an HTTP 429/503 refused, read from the request body as JSON."""

from __future__ import annotations

import json

import pytest

from codemode.host._http import CALL_MARKER, call_marker


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
