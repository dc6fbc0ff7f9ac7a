"""A small TOML writer for the shapes codemode writes (strings, numbers, booleans, string lists
and string tables), so generated files can carry comments that a generic writer would drop."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

_BARE_KEY = re.compile(r"[A-Za-z0-9_\-]+")

TomlScalar = str | int | float | bool


def key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else string(name)


def string(value: str) -> str:
    # JSON string escapes are a subset of TOML basic-string escapes, except that TOML has no
    # "\/" (json.dumps never emits it), so json.dumps gives a valid TOML basic string.
    return json.dumps(value, ensure_ascii=False)


def value(item: TomlScalar | Sequence[str] | Mapping[str, str]) -> str:
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int | float):
        return repr(item)
    if isinstance(item, str):
        return string(item)
    if isinstance(item, Mapping):
        inner = ", ".join(f"{key(k)} = {string(v)}" for k, v in item.items())
        return "{ " + inner + " }" if inner else "{}"
    return "[" + ", ".join(string(v) for v in item) + "]"
