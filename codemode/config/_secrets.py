"""``${ENV_VAR}`` references in configuration values.

Secrets never live in ``codemode.toml``: a value such as ``"Bearer ${GITHUB_TOKEN}"`` names an
environment variable of the *host* process, and is resolved only when the host connects to
the server. Resolved values are never written to disk, into stubs or into the sandbox.
``$$`` stands for a literal ``$``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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
        return environ[name]

    return _TOKEN.sub(substitute, value)
