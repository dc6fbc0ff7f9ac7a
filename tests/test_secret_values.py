"""The values of configured ``${VAR}`` secrets are hidden by value, in their common encodings
(issue 36, class 4), at every chokepoint that does not need a server: the redaction functions,
the result filter, the ledger's stored texts and the config's resolution."""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Iterator

import mcp_types
import pytest

from codemode._redaction import (
    MIN_SECRET_CHARS,
    encoded_forms,
    forget_secrets,
    known_secret_in,
    might_hold_secrets,
    redact_known,
    redact_secrets,
    redact_value,
    remember_secret,
    secret_kinds_in,
)
from codemode.broker import PiiVault, ResultFilter
from codemode.calls import ToolError, ToolResult
from codemode.config import ResultPolicy, check_references, resolve_references
from codemode.ledger._context import stored_text
from codemode.ledger._stored import stored_summary

SECRET = "q7Vz+kP2/wX9!mN4"
PNG = b"\x89PNG\r\n\x1a\n"
RAW = SECRET.encode()
MARKER = "[REDACTED:${SERVICE_KEY}]"


@pytest.fixture(autouse=True)
def remembered() -> Iterator[None]:
    forget_secrets()
    remember_secret(SECRET, "SERVICE_KEY")
    yield
    forget_secrets()


def embedded_base64(prefix: bytes, suffix: bytes, alphabet: str) -> str:
    encode = base64.b64encode if alphabet == "std" else base64.urlsafe_b64encode
    return encode(prefix + RAW + suffix).decode()


ENCODED = [
    pytest.param(SECRET, id="as is"),
    pytest.param(f"key={SECRET};", id="inside text"),
    pytest.param(urllib.parse.quote(SECRET, safe=""), id="url-encoded"),
    pytest.param(
        re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), urllib.parse.quote(SECRET, safe="")),
        id="url-encoded, lower-case hex",
    ),
    pytest.param(urllib.parse.quote_plus(SECRET), id="form-encoded"),
    pytest.param(RAW.hex(), id="hex"),
    pytest.param("0x" + RAW.hex().upper(), id="HEX"),
    pytest.param(json.dumps(SECRET + '"'), id="json-escaped"),
    *(
        pytest.param(embedded_base64(prefix, suffix, alphabet), id=f"{alphabet} base64 {prefix!r}+{suffix!r}")
        for alphabet in ("std", "url")
        for prefix in (b"", b"u", b"us", b"usr")
        for suffix in (b"", b"!", b"!?", b"!?#")
    ),
]


@pytest.mark.parametrize("text", ENCODED)
def test_every_common_encoding_of_a_remembered_value_is_hidden(text: str) -> None:
    assert known_secret_in(text) and might_hold_secrets(text) and "known" in secret_kinds_in(text)
    hidden, found = redact_secrets(text)
    assert found >= 1 and MARKER in hidden
    assert SECRET not in hidden and RAW.hex() not in hidden.lower()
    core = base64.b64encode(RAW).decode()[:12]
    assert core not in hidden and urllib.parse.quote(SECRET, safe="") not in hidden


def test_a_whole_encoding_is_hidden_whole_padding_included() -> None:
    assert redact_known(base64.b64encode(RAW).decode()) == (MARKER, 1)
    assert redact_known(base64.b64encode(b"us" + RAW).decode())[0] == f"dXN{MARKER}"


def test_a_long_value_such_as_a_private_key_is_remembered_and_hidden_in_every_encoding() -> None:
    # An RSA key in PEM is about 1,700 characters; its hex form twice that. Remembering it once
    # overflowed the stack while the pattern was built, and took the command down with it.
    key = (
        "-----BEGIN PRIVATE KEY-----\n"
        + "\n".join(["MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" * 2] * 26)
        + "\n-----END"
    )
    remember_secret(key, "CLIENT_KEY")
    for form in (key, json.dumps(key), key.encode().hex(), base64.b64encode(key.encode()).decode()):
        hidden, found = redact_known(f"before {form} after")
        assert found == 1 and "[REDACTED:${CLIENT_KEY}]" in hidden, form[:40]
    assert redact_known(f"x {SECRET} y") == (f"x {MARKER} y", 1)


def test_forgotten_short_and_machine_values_are_not_remembered() -> None:
    forget_secrets()
    assert not known_secret_in(SECRET)
    remember_secret("x" * (MIN_SECRET_CHARS - 1), "SHORT")
    remember_secret("/home/ana", "HOME")
    assert redact_known("x" * 20 + " /home/ana/file") == ("x" * 20 + " /home/ana/file", 0)
    assert all(len(form) >= MIN_SECRET_CHARS for form in encoded_forms("abcdefgh"))


def test_config_references_remember_values_when_read_and_when_resolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    forget_secrets()
    monkeypatch.setenv("READ_AT_LOAD", "value-read-at-load")
    check_references("Bearer ${READ_AT_LOAD}")
    assert redact_known("got value-read-at-load")[0] == "got [REDACTED:${READ_AT_LOAD}]"
    assert resolve_references("${OTHER}/x", {"OTHER": "resolved-later-1"}) == "resolved-later-1/x"
    assert redact_known("resolved-later-1")[0] == "[REDACTED:${OTHER}]"


def test_the_result_filter_hides_a_remembered_value_everywhere_in_an_answer() -> None:
    raw = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text=f"hello {SECRET}"),
            mcp_types.ImageContent(
                type="image", data=base64.b64encode(PNG + RAW).decode(), mime_type="image/png"
            ),
            mcp_types.ImageContent(
                type="image", data=base64.b64encode(PNG + b"plain").decode(), mime_type="image/png"
            ),
        ],
        structured_content={"user": "svc", "nested": [{"k": RAW.hex()}], SECRET: "as a key"},
        is_error=False,
    )
    outcome, report = ResultFilter(ResultPolicy(), PiiVault()).tool_result(raw)
    assert isinstance(outcome, ToolResult)
    dumped = outcome.model_dump_json()
    assert SECRET not in dumped and RAW.hex() not in dumped
    assert outcome.structured == {"user": "svc", "nested": [{"k": MARKER}], MARKER: "as a key"}
    assert [block.type for block in outcome.content] == ["text", "text", "image"], "a file is not rewritten"
    assert "holds a configured secret" in dumped
    assert report.secrets_redacted == 4


def test_a_tool_error_and_a_reason_hide_a_remembered_value() -> None:
    raw = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=f"denied for {urllib.parse.quote(SECRET)}")],
        is_error=True,
    )
    outcome, _ = ResultFilter(ResultPolicy(), PiiVault()).tool_result(raw)
    assert isinstance(outcome, ToolError) and outcome.message == f"denied for {MARKER}"


def test_the_ledger_stores_texts_and_values_without_a_remembered_value() -> None:
    assert stored_text(f"server error -32603: bad {SECRET}") == f"server error -32603: bad {MARKER}"
    summary = stored_summary({"result": {"echo": base64.b64encode(RAW).decode()}})
    assert summary is not None and MARKER in summary
    assert redact_value({"list": [SECRET, 1, None]}) == {"list": [MARKER, 1, None]}
