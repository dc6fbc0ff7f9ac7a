"""The rules that find a secret in a text or a JSON value: shapes, URL credentials, names and
labels, after the known values of :mod:`codemode._redaction._known` (see the package's table).

Names come in two kinds. An unambiguous one (``password``, ``client_secret``, ``api_key``,
``access_token``, ``authorization``, with any prefix) hides whatever it holds. An ambiguous one
(``token``, ``pwd``, ``auth``, ``credential``, ``pass``, as the name's last word) hides a value
only when the value reads as a credential (:func:`reads_as_credential`): ``{"token": "the"}`` from
a tokenizer, ``{"pwd": "/srv/app"}`` and ``{"auth": "oauth2"}`` are data. A label is found
anywhere in a line, whatever precedes it (``config: API_KEY=…``, ``note=DB_PASSWORD=…``).

Pagination cursors (``NextToken``, ``page_token``) are not secrets: hiding them would break
paging, so their names are excepted.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from typing import Any

from codemode._redaction._known import known_secret_in, redact_known

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

_URL_HEAD = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/?#@\"'<>\[\]]*:")
"""``scheme://user:`` (the user may be empty): what precedes a URL's password."""
_RUN_END = re.compile(r"[\s\"'<>]|\Z")
"""Where a URL (a run of characters a URL can hold unquoted) ends."""

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
    "authorization",
    "cookie",
)
"""Normalised names ending in one of these hold a secret whatever its value (``db_password``,
``AWS_SECRET_KEY``, ``x-api-key``, ``Set-Cookie``)."""

_AMBIGUOUS_WORDS = frozenset({"token", "pwd", "auth", "credential", "pass"})
"""A name whose last word is one of these holds a secret only if the value reads as one."""

_NOT_SECRET_SUFFIXES = ("pagetoken", "nexttoken", "continuationtoken", "synctoken", "cursortoken")
"""Paging cursors: opaque but harmless, and the program needs them to fetch the next page."""

_LABEL_TRIGGERS = ("pass", "secret", "token", "key", "auth", "pwd", "credential", "cookie")
"""Every secret name contains one of these (lowercase): the labelled scan's prefilter."""

_AUTH_SCHEMES = frozenset({"bearer", "basic", "digest", "token", "negotiate", "ntlm", "oauth", "oauth2"})

_LABEL = re.compile(r"(?P<label>[A-Za-z_][A-Za-z0-9_.-]{1,63})(?P<sep>(?:\\?[\"'])?[ \t]*[:=][ \t]*)")
"""A label and its ``:`` or ``=`` (after the label's closing quote, if any, escaped or not)."""
_LONG_BARE = 128
_QUOTED = (
    r"\\\"(?P<edq>(?:[^\"\\\n]|\\[^\"\n])+)\\\"|\"(?P<dq>(?:[^\"\\\n]|\\.)+)\"|'(?P<sq>[^'\n]+)'"
    r"|(?P<scheme>(?i:bearer|basic|digest|token|negotiate|ntlm)[ \t]+)?"
)
_VALUE = re.compile(_QUOTED + rf"(?P<bare>[^\s\"',;&?#<>]{{6,{_LONG_BARE}}})")
"""A secret name's value: quoted (to its closing quote, spaces and all; also JSON quoted inside a
JSON string, ``\\"password\\": \\"…\\"``) or bare (to the next space or delimiter), after an
optional auth scheme. A bare value is read 128 characters at most; when those are to be hidden,
it is hidden whole, to the end of its run (see :func:`_labelled_spans`)."""
_AMBIGUOUS_VALUE = re.compile(_QUOTED + r"(?P<bare>[^\s\"',;&?#<>=]{6,}=*)(?![^\s\"',;&?#<>])")
"""An ambiguous name's value: the same, but a bare one stops at ``=`` (base64 padding aside) and
must end there: a ``key=value`` list is not a credential (its own labels decide), and so a text
of ambiguous labels (``token=token=…``) is read once, not once per label."""
_BARE_RUN = re.compile(r"[^\s\"',;&?#<>]*")

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_WORD = r"(?:[a-z]{1,12}|[A-Z]{1,12}|[A-Z][a-z]{1,11})"
_WORDS_ONLY = re.compile(rf"{_WORD}(?:[-_.]{_WORD})*")
_NOT_CREDENTIAL = re.compile(r"\s|://|\\|[;&]|=(?!=*\Z)")
"""Prose, a URL, a Windows path, a ``key=value`` list (base64 padding excepted)."""
_DECIMAL = re.compile(r"-?\d+\.\d+")
_NAME_KEYS = ("name", "key", "parametername", "variable", "field")
_VALUE_KEYS = ("value", "secretvalue", "secretstring")

_NOT_SECRET, _AMBIGUOUS, _SECRET = 0, 1, 2


@functools.lru_cache(maxsize=4096)
def _normalise(name: str) -> str:
    return "".join(char for char in name.lower() if char.isalnum())


@functools.lru_cache(maxsize=4096)
def _name_kind(name: str) -> int:
    """``_SECRET``, ``_AMBIGUOUS`` or ``_NOT_SECRET`` (cached: a result repeats its keys)."""
    normal = _normalise(name)
    if not normal or normal.endswith(_NOT_SECRET_SUFFIXES):
        return _NOT_SECRET
    if normal.endswith(_SECRET_SUFFIXES):
        return _SECRET
    words = _WORDS.findall(name)
    return _AMBIGUOUS if words and words[-1].lower() in _AMBIGUOUS_WORDS else _NOT_SECRET


def is_secret_field(name: str) -> bool:
    """Whether a field (or variable) called ``name`` may hold a secret: always for an unambiguous
    name, when the value reads as a credential for an ambiguous one (see the module's notes)."""
    return _name_kind(name) != _NOT_SECRET


def reads_as_credential(value: str) -> bool:
    """Whether a value under an ambiguous name (``token``, ``pwd``, ...) is a credential.

    Not one: shorter than 6 characters, prose (a space), a path, a URL (its password, if any, is
    the URL rule's), a ``key=value`` list (its own labels decide), a decimal number, an auth
    scheme's name, or words (letters in chunks of at most 12, each lower, upper or title case,
    joined by ``-``, ``_`` or ``.``: ``expired``, ``not-set``, ``Bearer``). Anything else is:
    ``s3cr3t-tok3n``, ``123456``, ``aZ9kQ...``.
    """
    if len(value) < 6 or value[0] in "/~." or value.startswith("[REDACTED"):
        return False
    if _NOT_CREDENTIAL.search(value) or value.lower() in _AUTH_SCHEMES:
        return False
    return _DECIMAL.fullmatch(value) is None and _WORDS_ONLY.fullmatch(value) is None


def _hides(name: str, value: str) -> bool:
    """Whether a value called ``name`` (a field, a pair's name, a label) is hidden."""
    kind = _name_kind(name)
    if kind == _SECRET:
        return not value.startswith("[REDACTED")
    return kind == _AMBIGUOUS and reads_as_credential(value)


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


def _url_credential_spans(text: str) -> list[tuple[int, int]]:
    """Where the passwords of ``scheme://user:password@host`` URLs are in ``text``.

    A password runs to the *last* ``@`` of its URL (a run up to a space, a quote or ``<>``), as
    a lenient parser reads it, so one holding ``/``, ``?``, ``#`` or ``@`` is hidden whole (a later
    ``@`` in the path hides the path with it). Each run is read once: the scan is linear.
    """
    spans: list[tuple[int, int]] = []
    if "@" not in text or "://" not in text:
        return spans
    position = 0
    while (head := _URL_HEAD.search(text, position)) is not None:
        end = _RUN_END.search(text, head.end())
        run_end = end.start() if end is not None else len(text)
        at = text.rfind("@", head.end(), run_end)
        if at > head.end() and not text.startswith("[REDACTED", head.end()):
            spans.append((head.end(), at))
        position = max(run_end, head.end())
    return spans


def _url_credentials_in(text: str) -> bool:
    return bool(_url_credential_spans(text))


def might_hold_secrets(text: str) -> bool:
    """A cheap test: False means no rule here can match ``text`` (JSON text of a value included)."""
    return _ANY_TRIGGER.search(text.lower()) is not None or _url_credentials_in(text) or known_secret_in(text)


def secret_kinds_in(text: str, *, known: bool = True) -> set[str]:
    """Which kinds of secret occur anywhere in ``text`` (a known value counts as ``known``, URL
    credentials as ``url_credentials``, labelled values as ``labelled``). ``known=False``: the
    caller has already hidden every known value, so that scan is skipped."""
    kinds: set[str] = set()
    if known and known_secret_in(text):
        kinds.add("known")
    if _url_credentials_in(text):
        kinds.add("url_credentials")
    lowered = text.lower()
    if _ANY_TRIGGER.search(lowered) is None:
        return kinds
    kinds.update(
        kind
        for kind, words in _TRIGGERS.items()
        if any(word in lowered for word in words) and _PATTERNS[kind].search(text)
    )
    if any(word in lowered for word in _LABEL_TRIGGERS) and _labelled_spans(text):
        kinds.add("labelled")
    return kinds


def _labelled_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, label)`` of each labelled value to hide, in order, none overlapping (the
    label normalised: ``DB_PASSWORD`` -> ``dbpassword``).

    After a label that is not a secret the next one is looked for right after its separator, so
    it cannot swallow one that is (``note=DB_PASSWORD=…``, ``config: API_KEY=…``); after a hidden
    value, past its end. A value is read only after a secret name: after an unambiguous one it is
    hidden and skipped, after an ambiguous one it ends at the next ``=``. So each character is
    read a bounded number of times, however hostile the text.
    """
    spans: list[tuple[int, int, str]] = []
    position = 0
    while (label := _LABEL.search(text, position)) is not None:
        position = label.end()
        name = label.group("label")
        kind = _name_kind(name)  # cached: a text repeats its labels
        if kind == _NOT_SECRET:
            continue
        found = (_VALUE if kind == _SECRET else _AMBIGUOUS_VALUE).match(text, label.end())
        if found is None:
            continue
        group = found.lastgroup or "bare"  # the value's group closes last
        start, end = found.span(group)
        value = found.group(group)
        if value.lower() in _AUTH_SCHEMES or not _hides(name, value):
            continue  # ("Authorization: Bearer" names a scheme and holds no credential)
        if kind == _SECRET and group == "bare" and end - start >= _LONG_BARE:
            run = _BARE_RUN.match(text, end)
            end = run.end() if run is not None else end
        spans.append((start, end, _normalise(name)))
        position = end
    return spans


def _replace(text: str, spans: list[tuple[int, int, str]]) -> tuple[str, int]:
    """``text`` with each ``(start, end, kind)`` span (in order, apart) replaced by a marker."""
    if not spans:
        return text, 0
    pieces: list[str] = []
    done = 0
    for start, end, name in spans:
        pieces.append(text[done:start])
        pieces.append(f"[REDACTED:{name}]")
        done = end
    pieces.append(text[done:])
    return "".join(pieces), len(spans)


def redact_secrets(text: str, kinds: set[str] | None = None) -> tuple[str, int]:
    """Return ``text`` with secrets (of ``kinds``, default all) replaced, and how many were found."""
    count = 0
    if kinds is None or "known" in kinds:
        text, count = redact_known(text)
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
    if kinds is None or "url_credentials" in kinds:
        text, found = _replace(text, [(a, b, "url_password") for a, b in _url_credential_spans(text)])
        count += found
    if (kinds is None or "labelled" in kinds) and any(word in lowered for word in _LABEL_TRIGGERS):
        text, found = _replace(text, _labelled_spans(text))
        count += found
    return text, count


def redact_value_counting(value: Any, text: str | None = None) -> tuple[Any, int]:
    """Redact secrets at every depth of a JSON value; return the new value and how many were hidden.

    The input is never modified. A value without any trigger word is returned as is. ``text``:
    the value's JSON text, when the caller has it (the cheap test then reads it, not a new dump).
    """
    if value is None or isinstance(value, bool | int | float):
        return value, 0
    if isinstance(value, str):
        return redact_secrets(value)
    if text is None:
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
        scalar = isinstance(item, str | int | float) and not isinstance(item, bool) and item != ""
        if scalar and _hides(name, str(item)):  # pyright: ignore[reportUnknownArgumentType]
            hidden = _hidden(name, counter)
        elif scalar and pair_name is not None and _normalise(name) in _VALUE_KEYS:
            hidden = _hidden(pair_name, counter)
        else:
            hidden = _walk(item, counter)
        out[_key(key, out, counter)] = hidden
    return out


def _key(key: Any, out: dict[Any, Any], counter: list[int]) -> Any:
    """``key`` with its secrets hidden: a server can echo a credential as a key as easily as in
    a value. Two keys hidden alike both stay, the second with a number, so nothing is lost."""
    if not isinstance(key, str):
        return key
    text, found = redact_secrets(key)
    if not found:
        return key
    counter[0] += found
    unique, number = text, 1
    while unique in out:
        number += 1
        unique = f"{text} ({number})"
    return unique


def _pair_name(mapping: dict[Any, Any]) -> str | None:
    """The secret name of a ``{"name": "DB_PASSWORD", "value": "…"}`` pair, or None."""
    normalised = {_normalise(str(key)): item for key, item in mapping.items()}
    value = next((normalised[key] for key in _VALUE_KEYS if key in normalised), None)
    if value is None or isinstance(value, bool):
        return None
    for key in _NAME_KEYS:
        label = normalised.get(key)
        if isinstance(label, str) and _hides(label, str(value)):
            return label
    return None
