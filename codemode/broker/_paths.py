"""Which arguments of a call name filesystem paths, so that path scopes can cover all of them.

A scope rule names the argument it limits, but tools name their paths in many ways
(``path``, ``paths``, ``source``/``destination``, ``output_file``…). A path rule therefore also
covers every argument that *looks like* a path, found by these rules (first match wins):

=====================================  ====================================================
Where                                  Rule
=====================================  ====================================================
argument name (normalised, no ``_``)   one of :data:`PATH_NAMES`, or ends in a path suffix
pinned schema of the argument          ``format`` is a path format (also on array items)
nested objects and arrays              the same rules, at any depth (``ops[0].source``)
=====================================  ====================================================

Values found under such a name must be strings or arrays of strings; anything else cannot be
checked, so it is reported as unreadable and the gate refuses it (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

PATH_NAMES = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "filenames",
        "dir",
        "dirs",
        "directory",
        "directories",
        "folder",
        "folders",
        "source",
        "sources",
        "destination",
        "destinations",
        "src",
        "dst",
        "dest",
        "target",
        "root",
        "roots",
        "cwd",
        "workdir",
    }
)
_PATH_SUFFIXES = ("path", "paths", "file", "files", "filename", "dir", "directory", "folder")
_PATH_FORMATS = frozenset({"path", "file-path", "filepath", "directory", "dir-path"})
MAX_ARGUMENT_DEPTH = 64
"""How deep arguments may nest: the argument gate refuses deeper ones, and the walks over
arguments here and in the scope gate go that deep. Deeper containers, should one ever reach a
walk, count as unreadable: refused, not skipped."""


def path_like_name(name: str) -> bool:
    """Whether an argument called ``name`` holds a filesystem path by its name alone."""
    normal = "".join(char for char in name.lower() if char.isalnum())
    return normal in PATH_NAMES or normal.endswith(_PATH_SUFFIXES)


def _mapping(value: Any) -> dict[str, Any] | None:
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def _path_format(schema: Any) -> bool:
    mapping = _mapping(schema)
    if mapping is None:
        return False
    if mapping.get("format") in _PATH_FORMATS:
        return True
    items = _mapping(mapping.get("items"))
    return items is not None and items.get("format") in _PATH_FORMATS


@dataclass(frozen=True)
class PathArgument:
    """One path-like argument of a call: where it sits, its top-level name, and its values."""

    where: str
    """Dotted location, e.g. ``paths`` or ``ops[1].source``."""
    top: str
    """The top-level argument it sits under (what a scope rule names)."""
    values: tuple[str, ...]
    unreadable: bool = False
    """The value is not a string or an array of strings, so it cannot be checked."""


def _as_paths(value: Any) -> tuple[tuple[str, ...], bool]:
    if isinstance(value, str):
        return (value,), False
    if isinstance(value, list):
        items = cast(list[Any], value)
        if all(isinstance(item, str) for item in items):
            return tuple(cast(list[str], items)), False
    return (), True


def _properties(schema: Any) -> dict[str, Any]:
    mapping = _mapping(schema)
    props = _mapping(mapping.get("properties")) if mapping is not None else None
    return props or {}


def path_arguments(arguments: dict[str, Any], schema: Any) -> list[PathArgument]:
    """Every path-like argument of a call, at any depth, given the tool's pinned input schema."""
    found: list[PathArgument] = []
    props = _properties(schema)
    for name, value in arguments.items():
        _visit(name, name, value, props.get(name), found, 0)
    return found


def _visit(where: str, top: str, value: Any, schema: Any, found: list[PathArgument], depth: int) -> None:
    leaf = where.rsplit(".", 1)[-1].split("[", 1)[0]
    if path_like_name(leaf) or _path_format(schema):
        values, unreadable = _as_paths(value)
        if (
            unreadable
            and isinstance(value, dict | list)
            and depth < MAX_ARGUMENT_DEPTH
            and not _path_format(schema)
        ):
            # ``{"source": {"path": …}}`` is read through; an object with no path inside is not.
            before = len(found)
            _descend(where, top, value, schema, found, depth)
            if len(found) > before:
                return
        found.append(PathArgument(where, top, values, unreadable))
        return
    if depth < MAX_ARGUMENT_DEPTH:
        _descend(where, top, value, schema, found, depth)
    elif isinstance(value, dict | list) and value:
        found.append(PathArgument(where, top, (), unreadable=True))


def _descend(where: str, top: str, value: Any, schema: Any, found: list[PathArgument], depth: int) -> None:
    mapping = _mapping(value)
    if mapping is not None:
        props = _properties(schema)
        for key, item in mapping.items():
            _visit(f"{where}.{key}", top, item, props.get(key), found, depth + 1)
    elif isinstance(value, list):
        described = _mapping(schema)
        items = described.get("items") if described is not None else None
        for index, item in enumerate(cast(list[Any], value)):
            _visit(f"{where}[{index}]", top, item, items, found, depth + 1)
