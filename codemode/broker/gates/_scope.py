"""Resource-scope gate: the concrete resource a call names must be inside what was granted.

A scope rule names arguments of the matching tools (``path``, ``customer_id``, ``repo``…). Every
occurrence of a named argument counts, at any depth (``items[0].customer_id`` as well as
``customer_id``); each must be a string, a number or an array of them, anything else is refused.

- ``kind = "path"``: the value is decoded (percent-encoding, repeatedly; Unicode NFKC, so
  full-width dots and slashes count), must be absolute, must not contain NUL, and its *real
  path* (symlinks resolved) must lie under one of the allowed prefixes (themselves real-path
  resolved). Both the literal and the decoded form must pass, so ``..``, ``%2e%2e%2f``,
  ``．．／`` and symlinks that point out are all refused.
- ``kind = "glob"``: the value (or each value of an array) must match one of the allowed globs,
  by the rules below. As for paths, the literal and the decoded form must both match.

Glob rules. No wildcard matches ``?``, ``#`` or ``@``, and only ``**`` matches ``/``: those
change what a record id or a URL points at, so a value may contain one only where the pattern
has it literally.

============================  ================================================================
in an allowed glob            matches
============================  ================================================================
``*``                         any run of characters, not ``/`` (``CUST-00*``, ``acme/*``)
``**``                        any run of characters, ``/`` included (``docs/**``)
``?``                         one character, not ``/``
``[abc]`` ``[a-z]`` ``[!a]``  one character of (not of) the set; only a set that lists ``/``,
                              ``?``, ``#`` or ``@`` itself matches that character
anything else                 itself, case-sensitive
``scheme://host…``            a URL pattern: the value is parsed as a URL and must have the same
                              scheme, a host matching the pattern's host label by label (``*``
                              is one label, ``**`` one or more: ``https://*.example.com/*``),
                              the same port and user (none unless the pattern has one; ``:*``
                              allows any port), a path matching the pattern's path (no path
                              counts as ``/``), and a query or fragment only if the pattern has
                              one (``?`` and ``#`` separate them, as in any URL; they are never
                              wildcards here)
============================  ================================================================

Refused whatever the globs: a value with a control character, a backslash or a ``..`` segment
(``a/../b``), with invalid or too deeply nested percent-encoding, or longer than
:data:`MAX_GLOB_VALUE` characters.

``access = "read"`` grants read-risk tools only: a write-risk tool on that resource is refused
("only read granted but write requested"). A rule applies when one of its arguments is present,
at any depth.

A path rule also covers every path-like argument of the call (see :mod:`codemode.broker._paths`:
``paths``, ``source``/``destination``, arrays, nested objects, ``format: path``). On a tool that
any rule scopes, a path-like argument that no path rule covers is refused: a tool cannot carry a
path past the gate by naming it differently.
"""

from __future__ import annotations

import functools
import operator
import os
import re
import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker._paths import MAX_ARGUMENT_DEPTH, PathArgument, path_arguments
from codemode.broker._risk import access_for
from codemode.broker._selectors import any_match
from codemode.config import ScopeRule

_MAX_DECODE_ROUNDS = 4
MAX_GLOB_VALUE = 8_192
"""Longest value a glob rule checks (ids and URLs are far shorter; matching costs per character)."""
_SPECIAL = frozenset("?#@")
"""Never matched by a wildcard: each starts a URL's query, fragment or user."""
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._")


def _unescaped(value: str) -> str | None:
    """``value`` percent-decoded and NFKC-normalised until it stops changing; None if it keeps on.

    Raises UnicodeDecodeError when the percent-encoding is not UTF-8."""
    text = value
    for _ in range(_MAX_DECODE_ROUNDS):
        # NFKC inside the loop: full-width ``％２Ｆ`` becomes ``%2F``, which is then decoded too.
        decoded = unicodedata.normalize("NFKC", unquote(text, errors="strict"))
        if decoded == text:
            return text
        text = decoded
    return None  # still changing after several rounds: someone is hiding something


def _decoded(value: str) -> str | None:
    text = _unescaped(value)
    if text is None:
        return None
    if text.startswith("file://"):
        text = text[len("file://") :]
    return text.replace("\\", "/")


def _inside(path: str, prefixes: list[str]) -> str | None:
    if "\x00" in path or not os.path.isabs(path):
        return None
    real = os.path.realpath(path)
    for prefix in prefixes:
        root = os.path.realpath(prefix)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return real
    return None


def check_path(value: str, allowed: list[str]) -> tuple[bool, str]:
    """Whether ``value`` names a path under ``allowed``; the real path, or the reason it does not."""
    try:
        decoded = _decoded(value)
    except UnicodeDecodeError:
        return False, "the path's percent-encoding is not valid UTF-8"
    if decoded is None:
        return False, "the path is encoded too many times"
    if any(ord(c) < 32 for c in decoded):
        return False, "the path contains control characters"
    for form in {value, decoded}:
        if not os.path.isabs(form.replace("\\", "/")):
            return False, f"{value!r} is not an absolute path"
        if _inside(form, allowed) is None:
            return False, f"{value!r} resolves outside the allowed roots {allowed}"
    real = _inside(decoded, allowed)
    return True, real or decoded


# -- globs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Token:
    """One piece of a compiled glob: which characters it takes, and whether it repeats (a star)."""

    accepts: Callable[[str], bool]
    repeats: bool = False


def _wildcard(separator: str, *, crosses: bool = False) -> Callable[[str], bool]:
    return lambda char: char not in _SPECIAL and (crosses or char != separator)


def _char_set(pattern: str, start: int, separator: str) -> tuple[_Token, int] | None:
    """The ``[...]`` set at ``start`` and the index after it; None when it is not closed (then
    ``[`` is a literal, as in :mod:`fnmatch`)."""
    end = start + 1
    negated = pattern.startswith("!", end)
    end += negated
    body_start = end
    end += pattern.startswith("]", end)  # a leading ``]`` is a member, not the end
    end = pattern.find("]", end)
    if end < 0:
        return None
    body = pattern[body_start:end]
    ranges: list[tuple[str, str]] = []
    index = 0
    while index < len(body):
        if index + 2 < len(body) and body[index + 1] == "-":
            ranges.append((body[index], body[index + 2]))
            index += 3
        else:
            ranges.append((body[index], body[index]))
            index += 1
    # Only a set that names a special character (or the separator) itself may match it: a
    # range such as ``[!-~]`` must not let ``/`` or ``@`` through by accident.
    named = frozenset(body) - {"-"} if not negated else frozenset[str]()

    def accepts(char: str) -> bool:
        if any(low <= char <= high for low, high in ranges) == negated:
            return False
        return (char not in _SPECIAL and char != separator) or char in named

    return _Token(accepts), end + 1


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str, separator: str) -> tuple[_Token, ...]:
    tokens: list[_Token] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "*":
            run = len(pattern) - len(pattern[index:].lstrip("*"))
            tokens.append(_Token(_wildcard(separator, crosses=run - index > 1), repeats=True))
            index = run
            continue
        if char == "?":
            tokens.append(_Token(_wildcard(separator)))
        elif char == "[" and (found := _char_set(pattern, index, separator)) is not None:
            tokens.append(found[0])
            index = found[1]
            continue
        else:
            tokens.append(_Token(functools.partial(operator.eq, char)))
        index += 1
    return tuple(tokens)


def _glob(value: str, pattern: str, separator: str = "/") -> bool:
    """Whether ``value`` matches ``pattern`` (see the module's table); ``separator`` is what a
    single ``*`` does not cross (``/`` in paths, ``.`` in host names).

    A set of positions in the pattern is advanced one character at a time (no backtracking),
    so the cost is at most characters × pattern length, whatever the pattern."""
    tokens = _compiled(pattern, separator)
    end = len(tokens)

    def closed(states: set[int]) -> set[int]:
        # A star may match nothing: wherever one stands, the position after it is reached too.
        pending = list(states)
        while pending:
            at = pending.pop()
            if at < end and tokens[at].repeats and at + 1 not in states:
                states.add(at + 1)
                pending.append(at + 1)
        return states

    states = closed({0})
    for char in value:
        states = closed(
            {at if tokens[at].repeats else at + 1 for at in states if at < end and tokens[at].accepts(char)}
        )
        if not states:
            return False
    return end in states


def _authority(netloc: str) -> tuple[str | None, str, str] | None:
    """A URL's user (None when absent), host (lower case) and port text; None if malformed."""
    user, at, hostport = netloc.rpartition("@")
    if hostport.startswith("["):
        host, closed, rest = hostport[1:].partition("]")
        if not closed or ":" not in host or (rest and not rest.startswith(":")):
            return None  # brackets hold an IPv6 address and nothing else
        return (user if at else None), host.lower(), rest[1:]
    host, _, port = hostport.partition(":")
    return (user if at else None), host.lower(), port


def _good_host(host: str) -> bool:
    if ":" in host:  # an IPv6 literal (the brackets were removed)
        return all(char in "0123456789abcdef:." for char in host)
    return all(_HOST_CHARS.issuperset(label) and label for label in host.split("."))


def _part_matches(value: str, pattern: str, delimiter: str, got: str, want: str) -> bool:
    """A query or fragment: only where the pattern has one, and then matching it."""
    if delimiter not in pattern:
        return delimiter not in value
    return _glob(got, want)


def _url_matches(value: str, pattern: str) -> bool:
    if _URL.match(value) is None:
        return False
    try:
        want, got = urlsplit(pattern), urlsplit(value)
    except ValueError:
        return False  # a bracketed host that is not an address, say
    want_authority, got_authority = _authority(want.netloc), _authority(got.netloc)
    if want.scheme != got.scheme or want_authority is None or got_authority is None:
        return False
    (want_user, want_host, want_port), (got_user, got_host, got_port) = want_authority, got_authority
    if (want_user is None) != (got_user is None):
        return False
    if want_user is not None and got_user is not None and not _glob(got_user, want_user):
        return False
    if not (_good_host(got_host) and _glob(got_host, want_host, ".")):
        return False
    if (got_port and not (got_port.isascii() and got_port.isdigit())) or not _glob(got_port, want_port):
        return False
    return (
        _glob(got.path or "/", want.path or "/")
        and _part_matches(_before(value, "#"), _before(pattern, "#"), "?", got.query, want.query)
        and _part_matches(value, pattern, "#", got.fragment, want.fragment)
    )


def _before(text: str, delimiter: str) -> str:
    return text.partition(delimiter)[0]


def _matches(value: str, pattern: str) -> bool:
    if _URL.match(pattern) is not None:
        return _url_matches(value, pattern)
    return _glob(value, pattern)


def _unsafe(text: str) -> str | None:
    """Why ``text`` is refused whatever the globs say, or None."""
    if any(ord(char) < 32 or 0x7F <= ord(char) < 0xA0 for char in text):
        return "it contains control characters"
    if "\\" in text:
        return "it contains a backslash"
    if ".." in text.split("/"):
        return "it contains a '..' segment"
    return None


def check_glob(value: str, allowed: list[str]) -> str | None:
    """Why ``value`` is outside the ``allowed`` globs (see the module's table), or None if inside."""
    if len(value) > MAX_GLOB_VALUE:
        return f"is longer than {MAX_GLOB_VALUE:,} characters"
    try:
        decoded = _unescaped(value)
    except UnicodeDecodeError:
        return "has percent-encoding that is not valid UTF-8"
    if decoded is None:
        return "is percent-encoded too many times"
    if len(decoded) > MAX_GLOB_VALUE:  # NFKC can lengthen a value
        return f"is longer than {MAX_GLOB_VALUE:,} characters once decoded"
    forms = tuple(dict.fromkeys((value, decoded)))
    for form in forms:
        problem = _unsafe(form)
        if problem is not None:
            return f"is refused: {problem}"
    if any(all(_matches(form, pattern) for form in forms) for pattern in allowed):
        return None
    return f"is outside the granted scope {allowed}"


# -- the gate ------------------------------------------------------------------------------------


def named_arguments(arguments: dict[str, Any], names: Collection[str]) -> list[PathArgument]:
    """Every occurrence of an argument called one of ``names``, at any depth, with its values."""
    found: list[PathArgument] = []
    for key, value in arguments.items():
        _find(key, key, key, value, names, found, 1)
    return found


def _find(
    where: str,
    top: str,
    key: str | None,
    value: Any,
    names: Collection[str],
    found: list[PathArgument],
    depth: int,
) -> None:
    if key is not None and key in names:
        found.append(PathArgument(where, top, *_readable(value)))
        return
    if not isinstance(value, dict | list):
        return
    if depth >= MAX_ARGUMENT_DEPTH:
        found.append(PathArgument(where, top, (), True))  # too deep to search: fail closed
        return
    if isinstance(value, dict):
        for name, item in value.items():  # pyright: ignore[reportUnknownVariableType]
            _find(f"{where}.{name}", top, str(name), item, names, found, depth + 1)  # pyright: ignore[reportUnknownArgumentType]
    else:
        for index, item in enumerate(value):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            _find(f"{where}[{index}]", top, None, item, names, found, depth + 1)


class ScopeGate:
    name = "resource"

    async def check(self, call: Call, facts: Facts) -> Decision:
        assert facts.principal is not None, "the principal gate runs first"
        rules = [rule for rule in facts.principal.scopes if any_match(rule.tools, call.server, call.name)]
        if not rules:
            return Allow(facts)
        arguments = dict(call.arguments)
        paths = path_arguments(arguments, (facts.pinned or {}).get("inputSchema"))
        touched: list[str] = []
        for rule in rules:
            found = named_arguments(arguments, rule.argument_names)
            if rule.kind == "path":
                # Every path-like argument too, once: one found both ways is the same argument
                # (equal location and values); none is skipped on the strength of its dotted name
                # alone, which another argument could share.
                found = list(dict.fromkeys([*found, *paths]))
            if not found:
                continue
            refusal = self._check_rule(call, facts, rule, found, touched)
            if refusal is not None:
                return refusal
        if paths and not any(rule.kind == "path" for rule in rules):
            # A scoped tool must not carry a path that no path rule checked (fail closed).
            return Deny(
                self.name,
                f"{call.label} is scoped, but its argument {paths[0].where!r} names a path that no "
                'path scope covers; add a rule with kind = "path" for it',
            )
        return Allow(facts.with_(scope=facts.scope + tuple(dict.fromkeys(touched))))

    def _check_rule(
        self, call: Call, facts: Facts, rule: ScopeRule, found: list[PathArgument], touched: list[str]
    ) -> Deny | None:
        if rule.access == "read" and access_for(facts.risk) == "write":
            return Deny(
                self.name,
                f"only read access is granted on {', '.join(p.where for p in found)!r} "
                f"resources, but {call.label} may write (risk {facts.risk})",
            )
        for argument in found:
            if argument.unreadable:
                return Deny(
                    self.name, f"{argument.where!r} must be a string or a list of strings to be checked"
                )
            for text in argument.values:
                if rule.kind == "path":
                    ok, detail = check_path(text, rule.allow)
                    if not ok:
                        return Deny(self.name, f"{argument.where}: {detail}")
                    touched.append(f"{argument.where}={detail}")
                    continue
                refused = check_glob(text, rule.allow)
                if refused is not None:
                    return Deny(self.name, f"{argument.where}={text!r} {refused}")
                touched.append(f"{argument.where}={text}")
        return None


def _readable(value: Any) -> tuple[tuple[str, ...], bool]:
    """A named argument's values as text (ids may be numbers); anything else is unreadable."""
    items: list[Any] = list(value) if isinstance(value, list) else [value]  # pyright: ignore[reportUnknownArgumentType]
    if all(isinstance(item, str | int) and not isinstance(item, bool) for item in items):
        return tuple(str(item) for item in items), False
    return (), True
