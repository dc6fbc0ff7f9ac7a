"""Credentials that live in files (a private key, a workload's or a person's token): read when a
command signs in, never copied, and a file that cannot be read is named with what it should be."""

from __future__ import annotations

from pathlib import Path

from codemode.errors import AuthError

__all__ = ["read_credential_file"]


def read_credential_file(server: str, key: str, path_text: str, what: str) -> str:
    """The text of ``[servers.SERVER.oauth] KEY``'s file, or an :class:`AuthError` naming it."""
    path = Path(path_text).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AuthError(
            f"[servers.{server}.oauth] {key} {str(path)!r} cannot be read: "
            f"{getattr(exc, 'strerror', None) or exc}; give the path of {what}"
        ) from None
