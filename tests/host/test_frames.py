"""Bounded framing of a stdio server's output: caps, bad bytes and cut results, without a process."""

from __future__ import annotations

import json

import mcp_types as types
import pytest

from codemode.host._frames import TRUNCATED_META, Line, LineFramer, Oversized, decode_frame


def test_lines_split_across_chunks_come_out_whole() -> None:
    framer = LineFramer(cap=100)
    assert framer.feed(b'{"a":') == []
    assert framer.feed(b'1}\n{"b":2}\r\n{"c"') == [Line(b'{"a":1}'), Line(b'{"b":2}')]
    assert framer.feed(b":3}\n") == [Line(b'{"c":3}')]


def test_a_line_over_the_cap_keeps_only_the_cap_and_its_size() -> None:
    framer = LineFramer(cap=10)
    frames = [*framer.feed(b"0123456789abc"), *framer.feed(b"def" * 1000), *framer.feed(b"\nnext\n")]
    assert frames == [Oversized(b"0123456789", 13 + 3000), Line(b"next")]
    assert len(framer._pending) == 0  # pyright: ignore[reportPrivateUsage]


def test_the_framer_never_holds_more_than_the_cap() -> None:
    framer = LineFramer(cap=1024)
    for _ in range(200):
        assert framer.feed(b"x" * 65536) == []
        assert len(framer._pending) <= 1024  # pyright: ignore[reportPrivateUsage]


def test_a_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LineFramer(cap=0)


def _response(request_id: int, text: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}}
    return json.dumps(body).encode()


def test_a_valid_line_is_the_message() -> None:
    message = decode_frame(Line(_response(3, "hi")), {})
    assert not isinstance(message, Exception) and message is not None
    assert isinstance(message.message, types.JSONRPCResponse) and message.message.id == 3


def test_a_blank_line_is_nothing() -> None:
    assert decode_frame(Line(b"  "), {}) is None


def test_bytes_that_are_not_utf8_fail_that_request_only() -> None:
    bad = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"\xff\xfe"}]}}'
    message = decode_frame(Line(bad), {7: "tools/call"})
    assert message is not None and not isinstance(message, Exception)
    assert isinstance(message.message, types.JSONRPCError)
    assert message.message.id == 7
    assert "not UTF-8" in message.message.error.message


def test_garbage_without_an_id_is_a_parse_error_value_not_a_crash() -> None:
    message = decode_frame(Line(b"\xff\xfe garbage"), {})
    assert isinstance(message, ValueError)
    assert "no request id" in str(message)


def test_json_that_is_not_jsonrpc_names_the_request_when_it_can() -> None:
    message = decode_frame(Line(b'{"id": "abc", "what": 1}'), {})
    assert message is not None and not isinstance(message, Exception)
    assert isinstance(message.message, types.JSONRPCError) and message.message.id == "abc"


def test_a_cut_tool_result_is_ok_with_the_text_that_fits_and_a_marker() -> None:
    line = _response(9, "é" * 50_000 + "\\" + "tail")
    cap = 1000
    frame = LineFramer(cap).feed(line + b"\n")[0]
    assert isinstance(frame, Oversized) and frame.size == len(line)
    message = decode_frame(frame, {9: "tools/call"})
    assert message is not None and not isinstance(message, Exception)
    response = message.message
    assert isinstance(response, types.JSONRPCResponse) and response.id == 9
    result = types.CallToolResult.model_validate(response.result)
    assert result.is_error is False
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    kept, marker = text.text.split("\n[truncated by codemode", 1)
    assert kept and set(kept) == {"é"}  # no half character at the cut
    assert f"{len(line):,} bytes" in marker
    assert response.result["_meta"][TRUNCATED_META] == {"size": len(line), "cap": cap}


@pytest.mark.parametrize("escape", ["\\u00e9", "\\n", '\\"'])
def test_a_cut_inside_an_escape_drops_the_half_escape(escape: str) -> None:
    text = "a" * 30
    line = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"' + text.encode()
    for cut in range(1, len(escape)):
        frame = Oversized(line + escape[:cut].encode(), 10**8)
        message = decode_frame(frame, {1: "tools/call"})
        assert message is not None and not isinstance(message, Exception)
        assert isinstance(message.message, types.JSONRPCResponse)
        content = message.message.result["content"][0]["text"]
        assert content.startswith(text + "\n[truncated")


def test_a_cut_answer_to_anything_else_is_an_error_for_that_request() -> None:
    frame = Oversized(b'{"jsonrpc":"2.0","id":4,"result":{"tools":[{"name":"x"', 50_000_000)
    message = decode_frame(frame, {4: "tools/list"})
    assert message is not None and not isinstance(message, Exception)
    assert isinstance(message.message, types.JSONRPCError) and message.message.id == 4
    assert "50,000,000 bytes" in message.message.error.message


def test_a_cut_message_without_an_id_is_dropped_with_a_reason() -> None:
    message = decode_frame(Oversized(b'{"jsonrpc":"2.0","method":"notifications/message"', 10**7), {})
    assert isinstance(message, ValueError)
