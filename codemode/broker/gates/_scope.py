"""Resource-scope gate: the concrete resource a call names must be inside what was granted.

A scope rule names arguments of the matching tools (``path``, ``customer_id``, ``repo``…):

- ``kind = "path"``: the value is decoded (percent-encoding, repeatedly; Unicode NFKC, so
  full-width dots and slashes count), must be absolute, must not contain NUL, and its *real
  path* (symlinks resolved) must lie under one of the allowed prefixes (themselves real-path
  resolved). Both the literal and the decoded form must pass, so ``..``, ``%2e%2e%2f``,
  ``．．／`` and symlinks that point out are all refused.
- ``kind = "glob"``: the value (or each value of an array) must match one of the allowed globs.

``access = "read"`` grants read-risk tools only: a write-risk tool on that resource is refused
("only read granted but write requested"). A rule applies when one of its arguments is present.

A path rule also covers every path-like argument of the call (see :mod:`codemode.broker._paths`:
``paths``, ``source``/``destination``, arrays, nested objects, ``format: path``). On a tool that
any rule scopes, a path-like argument that no path rule covers is refused: a tool cannot carry a
path past the gate by naming it differently.
"""

from __future__ import annotations

import fnmatch
import os
import unicodedata
from typing import Any
from urllib.parse import unquote

from codemode.broker._decisions import Allow, Decision, Deny
from codemode.broker._facts import Call, Facts
from codemode.broker._paths import PathArgument, path_arguments
from codemode.broker._risk import access_for
from codemode.broker._selectors import any_match
from codemode.config import ScopeRule

_MAX_DECODE_ROUNDS = 4


def _decoded(value: str) -> str | None:
    text = value
    for _ in range(_MAX_DECODE_ROUNDS):
        decoded = unquote(text, errors="strict")
        if decoded == text:
            break
        text = decoded
    else:
        return None  # still changing after several rounds: someone is hiding something
    text = unicodedata.normalize("NFKC", text)
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


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]  # pyright: ignore[reportUnknownArgumentType]


class ScopeGate:
    name = "resource"

    async def check(self, call: Call, facts: Facts) -> Decision:
        assert facts.principal is not None, "the principal gate runs first"
        rules = [rule for rule in facts.principal.scopes if any_match(rule.tools, call.server, call.name)]
        if not rules:
            return Allow(facts)
        arguments = dict(call.arguments)
        paths = path_arguments(arguments, (facts.pinned or {}).get("inputSchema"))
        covered: set[str] = set()
        touched: list[str] = []
        for rule in rules:
            named = [name for name in rule.argument_names if name in arguments]
            found = [PathArgument(name, name, *_readable(arguments[name])) for name in named]
            if rule.kind == "path":
                found += [p for p in paths if p.top not in named]
            if not found:
                continue
            refusal = self._check_rule(call, facts, rule, found, touched)
            if refusal is not None:
                return refusal
            if rule.kind == "path":
                covered.update(p.where for p in paths)
        for path in paths:
            if path.where not in covered:
                # A scoped tool must not carry a path that no path rule checked (fail closed).
                return Deny(
                    self.name,
                    f"{call.label} is scoped, but its argument {path.where!r} names a path that no "
                    'path scope covers; add a rule with kind = "path" for it',
                )
        return Allow(facts.with_(scope=facts.scope + tuple(touched)))

    def _check_rule(
        self, call: Call, facts: Facts, rule: ScopeRule, found: list[PathArgument], touched: list[str]
    ) -> Deny | None:
        if rule.access == "read" and access_for(facts.risk) == "write":
            return Deny(
                self.name,
                f"only read access is granted on {', '.join(p.where for p in found)!r} resources, "
                f"but {call.label} may write (risk {facts.risk})",
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
                elif any(fnmatch.fnmatchcase(text, pattern) for pattern in rule.allow):
                    touched.append(f"{argument.where}={text}")
                else:
                    return Deny(
                        self.name, f"{argument.where}={text!r} is outside the granted scope {rule.allow}"
                    )
        return None


def _readable(value: Any) -> tuple[tuple[str, ...], bool]:
    """A named argument's values as text (ids may be numbers); anything else is unreadable."""
    items = _values(value)
    if all(isinstance(item, str | int) and not isinstance(item, bool) for item in items):
        return tuple(str(item) for item in items), False
    return (), True
