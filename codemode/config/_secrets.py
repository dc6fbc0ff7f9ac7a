"""``${ENV_VAR}`` references in configuration values.

Secrets never live in ``codemode.toml``: a value such as ``"Bearer ${GITHUB_TOKEN}"`` names an
environment variable of the *host* process, and is resolved only when the host connects to
the server. Resolved values are never written to disk, into stubs or into the sandbox.
``$$`` stands for a literal ``$``.

Every value a reference names is also handed to :func:`codemode._redaction.remember_secret`,
when the config is read (from this process's environment) and again when it is resolved (from the
environment it is resolved with): codemode then hides it, and its encodings, in everything it
shows or stores, even when a server echoes its own credential back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from codemode._redaction import remember_secret
from codemode.errors import MissingSecretError

_TOKEN = re.compile(r"\$\$|\$\{([^}]*)\}|\$")
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_references(value: str) -> list[str]:
    """Validate the reference syntax of ``value`` and return the variable names it uses."""
    names: list[str] = []
    for match in _TOKEN.finditer(value):
        piece = match.group(0)
        if piece == "$$":
            continue
        if piece == "$":
            raise ValueError(f"stray '$' in {value!r}: write ${{NAME}} for a variable or $$ for a literal $")
        name = match.group(1)
        if not _VAR_NAME.fullmatch(name):
            raise ValueError(f"${{{name}}} is not a valid environment variable name")
        names.append(name)
        current = os.environ.get(name)
        if current is not None:
            remember_secret(current, name)
    return names


def resolve_references(value: str, environ: Mapping[str, str]) -> str:
    """Replace each ``${NAME}`` by ``environ[NAME]``; raise :class:`MissingSecretError` if unset."""

    def substitute(match: re.Match[str]) -> str:
        piece = match.group(0)
        if piece == "$$":
            return "$"
        name = match.group(1)
        if name is None or name not in environ:
            raise MissingSecretError(name or "")
        remember_secret(environ[name], name)
        return environ[name]

    return _TOKEN.sub(substitute, value)
