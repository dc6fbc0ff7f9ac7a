"""Secret redaction: credentials in tool output never reach the program or the model.

Patterns cover the common shapes of leaked credentials (cloud keys, tokens of well-known
services, PEM private keys, bearer tokens, JWTs, ``password=...`` assignments). A match becomes
``[REDACTED:<kind>]``. False positives cost a little data; false negatives leak a secret, so
the patterns lean towards matching.
"""

from __future__ import annotations

import re

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
        ),
    ),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b")),
    (
        "aws_secret_key",
        re.compile(
            r"(?i)(aws.{0,20}(?:secret|private).{0,20}?[\"'=:\s]{1,4})([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
    ),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("api_key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}\b")),
    ("stripe_key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[0-9a-zA-Z]{16,}\b")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b")),
    ("bearer_token", re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/-]{16,}=*)")),
    (
        "password",
        re.compile(
            r"(?i)(\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token)\b\s*[:=]\s*[\"']?)([^\s\"',;]{6,})"
        ),
    ),
]


_TRIGGERS: dict[str, tuple[str, ...]] = {
    "private_key": ("private key-----",),
    "aws_access_key": ("akia", "asia", "agpa", "aida", "aroa", "anpa"),
    "aws_secret_key": ("aws",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "slack_token": ("xox",),
    "api_key": ("sk-",),
    "stripe_key": ("_live_", "_test_"),
    "google_api_key": ("aiza",),
    "jwt": ("eyj",),
    "bearer_token": ("bearer",),
    "password": (
        "password",
        "passwd",
        "pwd",
        "secret",
        "api_key",
        "api-key",
        "apikey",
        "access_token",
        "access-token",
        "accesstoken",
    ),
}
"""Literal text (lowercase) each pattern needs: a substring test per kind is far cheaper than a
regex scan, so large clean results skip the regexes entirely."""


_BY_KIND = dict(_PATTERNS)
assert list(_TRIGGERS) == list(_BY_KIND), "every pattern needs its triggers, in the same order"


def _triggered(text: str) -> list[str]:
    """Kinds whose literal trigger occurs in ``text``: the only ones worth a regex scan."""
    lowered = text.lower()
    return [kind for kind, words in _TRIGGERS.items() if any(word in lowered for word in words)]


def secret_kinds_in(text: str) -> set[str]:
    """Which kinds of secret occur anywhere in ``text``."""
    return {kind for kind in _triggered(text) if _BY_KIND[kind].search(text)}


def redact_secrets(text: str, kinds: set[str] | None = None) -> tuple[str, int]:
    """Return ``text`` with secrets (of ``kinds``, default all) replaced, and how many were found."""
    count = 0
    for kind in _triggered(text):
        if kinds is not None and kind not in kinds:
            continue
        pattern = _BY_KIND[kind]

        def substitute(match: re.Match[str], kind: str = kind) -> str:
            nonlocal count
            count += 1
            # Patterns with a label group keep the label ("password=") and hide only the value.
            if match.re.groups >= 2:
                return match.group(1) + f"[REDACTED:{kind}]"
            return f"[REDACTED:{kind}]"

        text = pattern.sub(substitute, text)
    return text, count
