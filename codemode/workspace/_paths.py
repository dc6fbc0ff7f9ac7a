"""Which names a workspace may hold: relative POSIX paths, checked before anything touches disk.

The names come from the sandbox, which is untrusted: a name that could leave the workspace
(``..``, an absolute path), that the file system would read differently (an empty or ``.``
component, a NUL) or that collides with another entry is refused, never repaired.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MAX_PATH_CHARS", "entries", "path_problem", "tree_problems"]

MAX_PATH_CHARS = 1024
"""The longest name (in characters) a workspace file may have, directories included."""
_MAX_COMPONENT_BYTES = 255


def path_problem(path: object) -> str | None:
    """Why ``path`` cannot name a workspace file, or None when it can."""
    if not isinstance(path, str) or not path:
        return "a file name must be a non-empty string"
    if len(path) > MAX_PATH_CHARS:
        return f"the name is longer than {MAX_PATH_CHARS} characters"
    if "\0" in path:
        return "the name holds a NUL character"
    if path.startswith("/"):
        return "the name is absolute (names are relative to /workspace)"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return "the name has an empty, '.' or '..' component (paths may not leave /workspace)"
        try:
            encoded = part.encode("utf-8")
        except UnicodeEncodeError:
            return "the name is not valid UTF-8"
        if len(encoded) > _MAX_COMPONENT_BYTES:
            return f"a component of the name is longer than {_MAX_COMPONENT_BYTES} bytes"
    return None


def tree_problems(paths: Iterable[str]) -> dict[str, str]:
    """Names (already valid one by one) that clash: a file that is also another file's folder."""
    names = set(paths)
    problems: dict[str, str] = {}
    for name in names:
        parts = name.split("/")
        for end in range(1, len(parts)):
            folder = "/".join(parts[:end])
            if folder in names:
                problems[name] = f"{folder!r} is a file, so it cannot also be a folder"
                break
    return problems


def entries(paths: Iterable[str]) -> int:
    """Files and the folders that hold them: what ``quota_files`` counts."""
    folders: set[str] = set()
    count = 0
    for name in paths:
        count += 1
        parts = name.split("/")
        folders.update("/".join(parts[:end]) for end in range(1, len(parts)))
    return count + len(folders)
