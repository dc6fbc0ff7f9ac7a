"""Lazy package exports: a name is imported from its module the first time someone uses it.

``import codemode`` (and so every ``codemode`` command) must not pay for the MCP SDK, pydantic
models, Docker and the engine before it knows it needs them; ``codemode --version`` needs none
of them. Each package declares ``{name: module}`` once; its ``__all__`` is that mapping's keys.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` for ``package``, importing ``exports[name]`` on first access."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals_of_package = importlib.import_module(package).__dict__
        globals_of_package[name] = value  # next access is a plain attribute
        return value

    return sorted(exports), __getattr__
