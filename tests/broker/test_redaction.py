"""Secrets are found by shape, by field name at any depth, in name/value pairs and by label."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemode._redaction import (
    _rules,
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
    triggers = _rules._TRIGGERS  # pyright: ignore[reportPrivateUsage]
    words = [*(w for group in triggers.values() for w in group), *_rules._LABEL_TRIGGERS]  # pyright: ignore[reportPrivateUsage]
    for word in words:
        assert might_hold_secrets(f'{{"x": "..{word.upper()}.."}}'), word
    assert not might_hold_secrets('{"writes": [], "total": 0}')


# -- issue 36, class 3: a label is found anywhere in a line, and URL credentials -------------

LABELLED_ANYWHERE = [
    ("config: API_KEY=abcd1234efgh5678", "abcd1234efgh5678"),
    ("env: password=hunter22hunter", "hunter22hunter"),
    ("log: token=tok3n-0f-the-day", "tok3n-0f-the-day"),
    ("note=DB_PASSWORD=s3cr3t-value", "s3cr3t-value"),
    ("a=b c=d x-api-key: 0123456789abcdef", "0123456789abcdef"),
    ("settings(level=3, client_secret='quite secret words')", "quite secret words"),
    ('{"msg": "ok", "nested": "{\\"password\\": \\"correct horse battery\\"}"}', "correct horse battery"),
    ('error: {"token": "a8f7e6d5c4b3a291"} rejected', "a8f7e6d5c4b3a291"),
    (
        "Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
        "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
    ),
]


@pytest.mark.parametrize(("text", "secret"), LABELLED_ANYWHERE)
def test_a_secret_label_is_found_whatever_precedes_it(text: str, secret: str) -> None:
    redacted, found = redact_secrets(text)
    assert found >= 1 and secret not in redacted, redacted
    assert "[REDACTED:" in redacted


def test_a_quoted_value_is_hidden_to_its_closing_quote() -> None:
    redacted, _ = redact_secrets('{"password": "correct horse battery staple", "user": "ana"}')
    assert redacted == '{"password": "[REDACTED:password]", "user": "ana"}'


URL_CREDENTIALS = [
    ("postgres://app:pg-pass-123@db.internal:5432/app", "pg-pass-123"),
    ("connect to https://user:pa55w0rd@host.example/ now", "pa55w0rd"),
    ("redis://:r3d1s-pw@cache:6379/0", "r3d1s-pw"),
    ("mysql://root:p@ss/w#rd@db:3306/x", "p@ss/w#rd"),
    ('{"dsn": "amqp://guest:guestpw1@mq/vhost"}', "guestpw1"),
]


@pytest.mark.parametrize(("text", "password"), URL_CREDENTIALS)
def test_url_credentials_are_hidden_and_the_user_and_host_kept(text: str, password: str) -> None:
    redacted, found = redact_secrets(text)
    assert found >= 1 and password not in redacted, redacted
    assert ":[REDACTED:url_password]@" in redacted
    assert might_hold_secrets(text)


@pytest.mark.parametrize(
    "text",
    [
        "mail ana@example.com or see https://example.com/a",
        "https://example.com/users/@ana",
        "ssh git@github.com:org/repo.git",
        "token: expired",
        "password: none",
        "the password policy requires 12 characters",
        "Authorization: Bearer",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b by ana",
        "pwd=/home/ana/project",
    ],
)
def test_text_without_a_secret_is_left_alone(text: str) -> None:
    assert redact_secrets(text) == (text, 0)


# -- issue 36, minor: field names alone blank only unambiguous names ------------------------


@pytest.mark.parametrize(
    "value",
    [
        {"token": "the", "pos": "DT"},
        {"tokens": ["a", "b"], "token": "hello"},
        {"pwd": "/srv/app", "cwd": "/srv"},
        {"dsn": "postgres://db.internal/app", "pin": "123456"},
        {"auth": "oauth2", "credential": "password"},
        {"shipping": "DHL-1234567", "auth_method": "basic"},
    ],
)
def test_ambiguous_names_keep_values_that_are_not_credentials(value: dict[str, Any]) -> None:
    assert redact_value(value) == value


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"token": "a8f7e6d5c4b3a2918f7e"}, "token"),
        ({"pwd": "hunter22"}, "pwd"),
        ({"csrfToken": "Zm9vYmFyYmF6cXV4"}, "csrfToken"),
        ({"auth": "dXNlcjpwYXNz"}, "auth"),
        ({"user": {"pass": 98765432}}, "pass"),
    ],
)
def test_ambiguous_names_hide_values_that_read_as_credentials(value: dict[str, Any], field: str) -> None:
    assert f"[REDACTED:{field.lower()}]" in repr(redact_value(value))


def test_unambiguous_names_hide_any_value() -> None:
    value = {"password": "hello", "client_secret": "x", "Set-Cookie": "a=b", "authorization": "granted"}
    assert all(str(v).startswith("[REDACTED:") for v in redact_value(value).values())


def test_a_secret_in_a_key_is_hidden_and_keys_stay_distinct() -> None:
    key = "ghp_" + "k" * 36
    redacted = redact_value({key: 1, "ghp_" + "j" * 36: 2, "plain": 3})
    assert key not in repr(redacted)
    assert sorted(redacted.values()) == [1, 2, 3], "two keys hidden alike both stay"
