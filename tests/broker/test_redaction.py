"""Secrets are found by shape, by field name at any depth, in name/value pairs and by label."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemode import _redaction
from codemode._redaction import (
    any_word_pattern,
    is_secret_field,
    might_hold_secrets,
    redact_secrets,
    redact_value,
    redact_value_counting,
)
from codemode.broker import PiiVault, ResultFilter
from codemode.calls import ToolResult
from codemode.config import ResultPolicy

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
STS = {
    "Credentials": {
        "AccessKeyId": "ASIAIOSFODNN7EXAMPLE",
        "SecretAccessKey": AWS_SECRET,
        "SessionToken": "FwoGZXIvYXdzEJr//////////wEaDH7" + "x" * 40,
        "Expiration": "2026-12-04T12:00:00Z",
    },
    "AssumedRoleUser": {"Arn": "arn:aws:sts::123456789012:assumed-role/demo/s"},
}


def test_structured_aws_sts_credentials_are_redacted_at_every_depth() -> None:
    redacted, found = redact_value_counting({"result": [STS]})
    text = repr(redacted)
    assert AWS_SECRET not in text and "FwoGZXIvYXdz" not in text and "ASIAIOSFODNN7EXAMPLE" not in text
    assert found == 3
    creds = redacted["result"][0]["Credentials"]
    assert creds["Expiration"] == "2026-12-04T12:00:00Z", "non-secret fields are kept"
    assert creds["SecretAccessKey"] == "[REDACTED:secretaccesskey]"
    assert redacted["result"][0]["AssumedRoleUser"] == STS["AssumedRoleUser"]
    assert STS["Credentials"]["SecretAccessKey"] == AWS_SECRET, "the input is not modified"


def test_name_value_pairs_hide_the_value() -> None:
    env = [{"Name": "DB_PASSWORD", "Value": "s3cr3t-value"}, {"Name": "REGION", "Value": "eu-west-1"}]
    redacted = redact_value(env)
    assert redacted[0]["Value"].startswith("[REDACTED:") and redacted[1]["Value"] == "eu-west-1"


@pytest.mark.parametrize(
    "text",
    [
        'config: {"SecretAccessKey": "' + AWS_SECRET + '"}',
        "DB_PASSWORD=correct-horse-battery",
        "x-api-key: 0123456789abcdef",
        "https://h.example/cb?access_token=abcdef123456&x=1",
    ],
)
def test_labelled_secrets_inside_text_are_hidden(text: str) -> None:
    redacted, found = redact_secrets(text)
    assert found >= 1 and "[REDACTED:" in redacted
    for secret in (AWS_SECRET, "correct-horse-battery", "0123456789abcdef", "abcdef123456"):
        assert secret not in redacted


@pytest.mark.parametrize(
    "value",
    [
        {"NextToken": "eyJuZXh0IjogMn0=", "page_token": "abc123def456"},
        {"max_tokens": 4096, "token_count": 12, "sort_key": "name"},
        {"pin": True, "public_key": "ssh-ed25519 AAAA"},
        "the password policy requires 12 characters",
        "Authorization header missing",
    ],
)
def test_ordinary_data_is_left_alone(value: Any) -> None:
    assert redact_value(value) == value


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("SecretAccessKey", True),
        ("aws_secret_access_key", True),
        ("client-secret", True),
        ("refreshToken", True),
        ("private_key", True),
        ("DB_PASSWORD", True),
        ("token", True),
        ("NextToken", False),
        ("page_token", False),
        ("tokens", False),
        ("AccessKeyId", False),
    ],
)
def test_secret_field_names(name: str, secret: bool) -> None:
    assert is_secret_field(name) is secret


def test_the_result_filter_redacts_structured_secrets_and_counts_them() -> None:
    raw = mcp_types.CallToolResult(content=[], structured_content=STS, is_error=False)
    outcome, report = ResultFilter(ResultPolicy(), PiiVault()).tool_result(raw)
    assert isinstance(outcome, ToolResult)
    assert AWS_SECRET not in repr(outcome.structured)
    assert report.secrets_redacted >= 3
    off, _ = ResultFilter(ResultPolicy(redact_secrets=False, pii="off"), PiiVault()).tool_result(raw)
    assert AWS_SECRET in repr(off.structured), "the policy switch still works"  # type: ignore[union-attr]


@given(
    st.lists(st.text(alphabet="abk_-y ", min_size=1, max_size=5), max_size=8),
    st.text(alphabet="abk_-y .", max_size=30),
)
def test_the_trigger_pattern_finds_a_word_exactly_when_one_occurs(words: list[str], text: str) -> None:
    assert (any_word_pattern(words).search(text) is not None) == any(word in text for word in words)


def test_the_secret_prefilter_agrees_with_each_trigger_word() -> None:
    triggers = _redaction._TRIGGERS  # pyright: ignore[reportPrivateUsage]
    words = [*(w for group in triggers.values() for w in group), *_redaction._LABEL_TRIGGERS]  # pyright: ignore[reportPrivateUsage]
    for word in words:
        assert might_hold_secrets(f'{{"x": "..{word.upper()}.."}}'), word
    assert not might_hold_secrets('{"writes": [], "total": 0}')
