"""The values of configured secrets, hidden wherever they turn up.

codemode resolves every ``${VAR}`` reference in ``codemode.toml`` itself (a server's ``env``, a
header, a URL, an OAuth client secret, a ``serve`` token, the ledger URL), so it knows those
values: a server that echoes its own credential back, in a result, an error, a JSON-RPC error
or on stderr, must not get it past codemode in clear. Each resolved value is remembered here
(:func:`remember_secret`) with the encodings it commonly travels in, and every output path
replaces any of them with ``[REDACTED:${VAR}]`` (:func:`redact_known`).

==================  ===========================================================================
encoding            forms remembered
==================  ===========================================================================
as is               the value
JSON string         its escaped form, ASCII-only and not, when it differs (a quote, a newline)
URL-encoded         ``quote`` (``/`` kept or not) and ``quote_plus``, with upper or lower hex
hex                 lower and upper case
base64              standard and URL-safe alphabets: the whole encoding, and the characters
                    that depend only on the value when it sits at each of the three offsets
                    (mod 3) inside a longer encoded text (``user:secret`` in Basic auth)
==================  ===========================================================================

Values shorter than :data:`MIN_SECRET_CHARS` are not remembered: hiding every ``8080`` or
``dev`` in every answer would cost more data than it could save. Neither are the process's own
well-known variables (``HOME``, ``PATH``, ...): a ``${HOME}`` in a server's arguments is a path,
and hiding it would blank every path a filesystem server returns.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import urllib.parse
from typing import Any, NamedTuple

MIN_SECRET_CHARS = 8
"""The shortest value remembered: shorter ones are ports, names and words found everywhere."""

NOT_SECRET_VARIABLES = frozenset(
    {"HOME", "USER", "LOGNAME", "USERNAME", "PWD", "OLDPWD", "PATH", "SHELL", "TMPDIR", "TEMP", "TMP"}
    | {"LANG", "LANGUAGE", "TERM", "TZ", "HOSTNAME", "USERPROFILE", "APPDATA", "LOCALAPPDATA"}
    | {"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"}
)
"""Variables of the host process that are facts about the machine, never credentials."""


class _Known(NamedTuple):
    pattern: re.Pattern[str] | None
    """Every remembered form, longest first at each position (see :func:`_longest_first`)."""
    names: dict[str, str]
    """Each form -> the variable whose value it encodes."""


_known = _Known(None, {})
_lock = threading.Lock()
"""Serialises writers; readers take :data:`_known` as one tuple, so they never see half an update."""


def remember_secret(value: str, variable: str) -> None:
    """Hide ``value`` (the value of ``${variable}``) and its encodings from now on, everywhere."""
    global _known
    if len(value) < MIN_SECRET_CHARS or variable in NOT_SECRET_VARIABLES:
        return
    with _lock:
        names = dict(_known.names)
        added = False
        for form in encoded_forms(value):
            if form not in names:
                names[form] = variable
                added = True
        if added:
            _known = _Known(_longest_first(names), names)


def forget_secrets() -> None:
    """Forget every remembered value (for tests; a process keeps what it resolved)."""
    global _known
    with _lock:
        _known = _Known(None, {})


def known_secret_in(text: str) -> bool:
    """Whether ``text`` holds a remembered value in any of its forms (one scan; none remembered:
    no scan at all)."""
    pattern = _known.pattern
    return pattern is not None and pattern.search(text) is not None


def redact_known(text: str) -> tuple[str, int]:
    """``text`` with every remembered value, in any of its forms, replaced; and how many."""
    known = _known
    if known.pattern is None:
        return text, 0
    count = 0

    def hide(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return "[REDACTED:${" + known.names[match.group(0)] + "}]"

    return known.pattern.sub(hide, text), count


def encoded_forms(value: str) -> set[str]:
    """``value`` and the encodings it commonly travels in (see the module's table)."""
    raw = value.encode("utf-8")
    forms = {value, raw.hex(), raw.hex().upper()}
    forms.update(json.dumps(value, ensure_ascii=flag)[1:-1] for flag in (True, False))
    for quoted in (
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote(value),
        urllib.parse.quote_plus(value, safe=""),
    ):
        forms.add(quoted)
        forms.add(re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quoted))
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        forms.add(encode(raw).decode("ascii"))
        forms.update(_base64_cores(raw, encode))
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def _base64_cores(raw: bytes, encode: Any) -> list[str]:
    """The base64 characters that depend only on ``raw`` when it starts at offset 0, 1 or 2
    (mod 3) of a longer encoded text. Each base64 character carries 6 bits: at offset ``k`` the
    first ``ceil(8k/6)`` characters hold bits of the bytes before, and the characters after the
    last whole 6 bits of ``raw`` hold bits of the bytes after; the ones between are fixed."""
    cores: list[str] = []
    for offset, first in ((0, 0), (1, 2), (2, 3)):
        encoded: str = encode(b"\0" * offset + raw).decode("ascii")
        last = (offset + len(raw)) * 8 // 6
        cores.append(encoded[first:last])
    return cores


def _longest_first(forms: dict[str, str]) -> re.Pattern[str]:
    """One pattern for all ``forms``, built as a trie (``ab(?:c(?:def)?|x)``): each position tries
    only the forms that start with its character, and where one form is a prefix of another the
    longer is tried first (a greedy ``?``), so the whole encoding wins over a base64 core."""
    trie: dict[str, Any] = {}
    for form in forms:
        node = trie
        for char in form:
            node = node.setdefault(char, {})
        node[""] = {}

    def alternatives(node: dict[str, Any]) -> str:
        branches: list[str] = []
        for char, child in sorted(node.items()):
            if not char:
                continue
            run = char
            # A chain without a branch or an end is one literal: recursion (and group nesting)
            # then goes as deep as the branch points, not as the characters of a long key.
            while len(child) == 1 and "" not in child:
                ((next_char, child),) = child.items()
                run += next_char
            branches.append(re.escape(run) + alternatives(child))
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 and "" not in node else f"(?:{'|'.join(branches)})"
        return body + "?" if "" in node else body

    return re.compile(alternatives(trie))
