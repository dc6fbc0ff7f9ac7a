"""Secret redaction: credentials never reach the program, the model, the ledger or a terminal.

Three signals find a secret, because each alone misses some:

==========================  =============================================  ==========================
Signal                      Example                                        Replaced by
==========================  =============================================  ==========================
shape of the value          ``AKIA…``, ``ghp_…``, PEM blocks, JWTs         ``[REDACTED:<kind>]``
field name (any depth)      ``{"SecretAccessKey": "wJalr…"}``              ``[REDACTED:<field>]``
name/value pair             ``{"Name": "DB_PASSWORD", "Value": "…"}``      ``[REDACTED:<name>]``
label inside a string       ``password=hunter22``, ``"token": "…"``        label kept, value hidden
==========================  =============================================  ==========================

False positives cost a little data; false negatives leak a secret, so the rules lean towards
matching. Pagination cursors (``NextToken``, ``page_token``) are not secrets: hiding them would
break paging, so their names are excepted. Stdlib only: the ledger and the CLI use it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

_PATTERNS: dict[str, re.Pattern[str]] = {
    "private_key": re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
    ),
    "aws_access_key": re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"),
    "github_token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
    "slack_token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    "api_key": re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}\b"),
    "stripe_key": re.compile(r"\b(?:sk|rk)_(?:live|test)_[0-9a-zA-Z]{16,}\b"),
    "google_api_key": re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b"),
    "bearer_token": re.compile(r"(?i)(\b(?:bearer|basic)\s+)([A-Za-z0-9._~+/-]{12,}=*)"),
}

_TRIGGERS: dict[str, tuple[str, ...]] = {
    "private_key": ("private key-----",),
    "aws_access_key": ("akia", "asia", "agpa", "aida", "aroa", "anpa"),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "slack_token": ("xox",),
    "api_key": ("sk-",),
    "stripe_key": ("_live_", "_test_"),
    "google_api_key": ("aiza",),
    "jwt": ("eyj",),
    "bearer_token": ("bearer", "basic"),
}
"""Literal text (lowercase) each pattern needs: a substring test is far cheaper than a regex
scan, so large clean results skip the regexes entirely."""

assert list(_TRIGGERS) == list(_PATTERNS), "every pattern needs its triggers, in the same order"

_SECRET_NAMES = frozenset(
    {
        "auth",
        "authorization",
        "cookie",
        "setcookie",
        "credential",
        "credentials",
        "passphrase",
        "pin",
        "pwd",
        "passwd",
        "secret",
        "token",
        "dsn",
        "connectionstring",
    }
)
"""Normalised field names that are secrets as a whole."""

_SECRET_SUFFIXES = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "secretkey",
    "secretaccesskey",
    "privatekey",
    "signingkey",
    "encryptionkey",
    "apikey",
    "accesstoken",
    "refreshtoken",
    "idtoken",
    "sessiontoken",
    "securitytoken",
    "authtoken",
    "bearertoken",
    "apitoken",
    "clientsecret",
    "credentials",
    "connectionstring",
)
"""Normalised field names ending in one of these are secrets (``db_password``, ``AWS_SECRET_KEY``)."""

_NOT_SECRET_SUFFIXES = ("pagetoken", "nexttoken", "continuationtoken", "synctoken", "cursortoken")
"""Paging cursors: opaque but harmless, and the program needs them to fetch the next page."""

_LABEL_TRIGGERS = ("pass", "secret", "token", "key", "auth", "pwd", "credential", "cookie", "dsn")
"""Every secret field name contains one of these (lowercase): the labelled scan's prefilter."""

_LABELLED = re.compile(
    r"(?P<label>[A-Za-z_][A-Za-z0-9_.-]{1,63})(?P<sep>[\"']?\s*[:=]\s*[\"']?)(?P<value>[^\s\"',;&?#]{6,})"
)
_AUTH_SCHEMES = frozenset({"bearer", "basic", "digest", "token"})
_NAME_KEYS = ("name", "key", "parametername", "variable", "field")
_VALUE_KEYS = ("value", "secretvalue", "secretstring")


def _normalise(name: str) -> str:
    return "".join(char for char in name.lower() if char.isalnum())


def is_secret_field(name: str) -> bool:
    """Whether a field (or variable) called ``name`` holds a secret, whatever its value looks like."""
    normal = _normalise(name)
    if not normal or normal.endswith(_NOT_SECRET_SUFFIXES):
        return False
    return normal in _SECRET_NAMES or normal.endswith(_SECRET_SUFFIXES)


def any_word_pattern(words: Iterable[str]) -> re.Pattern[str]:
    """A pattern that is found in a text iff one of ``words`` occurs in it, built as a trie
    (``a(?:kia|uth)|b(?:asic|earer)|...``): one scan, each position trying only the words that
    start with its character. On a small answer that is several times cheaper than testing each
    word with ``in``, and no dearer on a large one; a flat alternation is twice as dear there."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here: whatever follows, the text holds it

    def alternatives(node: dict[str, Any]) -> str:
        if "" in node:
            return ""
        branches = [re.escape(char) + alternatives(child) for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"

    return re.compile(alternatives(trie) if trie else "(?!)")


_ANY_TRIGGER = any_word_pattern([*(w for words in _TRIGGERS.values() for w in words), *_LABEL_TRIGGERS])
"""Every trigger word, searched in the lowered text: the same answer as testing each with ``in``."""


def might_hold_secrets(text: str) -> bool:
    """A cheap test: False means no rule here can match ``text`` (JSON text of a value included)."""
    return _ANY_TRIGGER.search(text.lower()) is not None


def secret_kinds_in(text: str) -> set[str]:
    """Which kinds of secret occur anywhere in ``text`` (labelled values count as ``labelled``)."""
    lowered = text.lower()
    if _ANY_TRIGGER.search(lowered) is None:
        return set()
    kinds = {
        kind
        for kind, words in _TRIGGERS.items()
        if any(word in lowered for word in words) and _PATTERNS[kind].search(text)
    }
    if any(word in lowered for word in _LABEL_TRIGGERS) and any(
        _label_is_secret(match) for match in _LABELLED.finditer(text)
    ):
        kinds.add("labelled")
    return kinds


def _label_is_secret(match: re.Match[str]) -> bool:
    value = match.group("value")
    return (
        is_secret_field(match.group("label"))
        and value.lower() not in _AUTH_SCHEMES
        and not value.startswith("[REDACTED")
    )


def redact_secrets(text: str, kinds: set[str] | None = None) -> tuple[str, int]:
    """Return ``text`` with secrets (of ``kinds``, default all) replaced, and how many were found."""
    count = 0
    lowered = text.lower()
    for kind, pattern in _PATTERNS.items():
        if (kinds is not None and kind not in kinds) or not any(w in lowered for w in _TRIGGERS[kind]):
            continue

        def by_shape(match: re.Match[str], kind: str = kind) -> str:
            nonlocal count
            count += 1
            # Patterns with a label group keep the label ("Bearer ") and hide only the value.
            return (match.group(1) if match.re.groups >= 2 else "") + f"[REDACTED:{kind}]"

        text = pattern.sub(by_shape, text)
    if (kinds is None or "labelled" in kinds) and any(word in lowered for word in _LABEL_TRIGGERS):

        def by_label(match: re.Match[str]) -> str:
            nonlocal count
            if not _label_is_secret(match):
                return match.group(0)
            count += 1
            return f"{match.group('label')}{match.group('sep')}[REDACTED:{_normalise(match.group('label'))}]"

        text = _LABELLED.sub(by_label, text)
    return text, count


def redact_value_counting(value: Any) -> tuple[Any, int]:
    """Redact secrets at every depth of a JSON value; return the new value and how many were hidden.

    The input is never modified. A value without any trigger word is returned as is.
    """
    if value is None or isinstance(value, bool | int | float):
        return value, 0
    if isinstance(value, str):
        return redact_secrets(value)
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    if not might_hold_secrets(text):
        return value, 0
    counter = [0]
    return _walk(value, counter), counter[0]


def redact_value(value: Any) -> Any:
    """``value`` with every secret hidden (see the module's table)."""
    return redact_value_counting(value)[0]


def _hidden(name: str, counter: list[int]) -> str:
    counter[0] += 1
    return f"[REDACTED:{_normalise(name) or 'secret'}]"


def _walk(value: Any, counter: list[int]) -> Any:
    if isinstance(value, str):
        text, found = redact_secrets(value)
        counter[0] += found
        return text
    if isinstance(value, list | tuple):
        return [_walk(item, counter) for item in value]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(value, dict):
        return value
    pair_name = _pair_name(value)  # pyright: ignore[reportUnknownArgumentType]
    out: dict[Any, Any] = {}
    for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
        name = str(key)  # pyright: ignore[reportUnknownArgumentType]
        secret_here = is_secret_field(name) or (pair_name is not None and _normalise(name) in _VALUE_KEYS)
        if secret_here and isinstance(item, str | int | float) and not isinstance(item, bool) and item != "":
            out[key] = _hidden(pair_name if pair_name and not is_secret_field(name) else name, counter)
        else:
            out[key] = _walk(item, counter)
    return out


def _pair_name(mapping: dict[Any, Any]) -> str | None:
    """The secret name of a ``{"name": "DB_PASSWORD", "value": "…"}`` pair, or None."""
    normalised = {_normalise(str(key)): item for key, item in mapping.items()}
    if not any(key in normalised for key in _VALUE_KEYS):
        return None
    for key in _NAME_KEYS:
        label = normalised.get(key)
        if isinstance(label, str) and is_secret_field(label):
            return label
    return None
