"""A stdio server's command line as the host starts it: ``${ENV}`` references filled in, and the
command found the way the server's own process would find it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from codemode.config import MissingSecretError, resolve_references
from codemode.errors import ServerConnectionError

__all__ = ["find_executable", "resolve_setting"]


def find_executable(command: str, env: Mapping[str, str], cwd: str | None) -> str | None:
    """Resolve ``command`` the way the server's own process would (its PATH, its cwd)."""
    if os.sep in command:
        path = Path(cwd or ".") / command
        # abspath, not resolve(): a venv python is a symlink whose target would lose the venv.
        return os.path.abspath(path) if os.access(path, os.X_OK) and path.is_file() else None
    search = env.get("PATH") or os.environ.get("PATH") or os.defpath
    return shutil.which(command, path=search)


def resolve_setting(server: str, where: str, value: str, environ: Mapping[str, str]) -> str:
    """A config value with its ``${ENV}`` references filled in, or an error naming the variable."""
    try:
        return resolve_references(value, environ)
    except MissingSecretError as exc:
        raise ServerConnectionError(
            server,
            where,
            f"{where} refers to ${{{exc.variable}}}, which is not set in codemode's environment; "
            f"export {exc.variable} before starting codemode",
        ) from None
