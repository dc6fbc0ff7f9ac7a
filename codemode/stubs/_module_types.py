"""The type definitions generated for one module (TypedDicts, aliases) and the names they take."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from codemode.stubs._names import MODULE_LEVEL_RESERVED
from codemode.stubs._pytype import PyType

__all__ = ["AliasDef", "FieldDef", "ModuleTypes", "TypedDictDef"]


@dataclass(slots=True)
class FieldDef:
    key: str
    """The original JSON property name."""
    type: PyType
    required: bool
    description: str
    notes: list[str]


@dataclass(slots=True)
class TypedDictDef:
    name: str
    description: str
    fields: list[FieldDef] = field(default_factory=lambda: [])


@dataclass(slots=True)
class AliasDef:
    name: str
    type: PyType
    notes: list[str]


_IDENT_LIKE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class ModuleTypes:
    """The generated type definitions of one module, and the names they may use."""

    def __init__(self, reserved: Iterable[str]) -> None:
        self._taken: set[str] = set(MODULE_LEVEL_RESERVED) | set(reserved)
        self._last_suffix: dict[str, int] = {}
        """Per base name, the suffix last given: probing resumes there (many types, one hint)."""
        self.definitions: list[TypedDictDef | AliasDef] = []
        self.nodes = 0
        self.typeddicts = 0

    def new_name(self, hint: str) -> str:
        """A fresh module-level name derived from ``hint`` (deterministic: first come, first served)."""
        base = hint[:60] if _IDENT_LIKE.fullmatch(hint) else "Type"
        counter = self._last_suffix.get(base, 1)
        candidate = base if counter == 1 else f"{base}{counter}"
        while candidate in self._taken:
            counter += 1
            candidate = f"{base}{counter}"
        self._taken.add(candidate)
        self._last_suffix[base] = counter
        return candidate

    @property
    def names(self) -> frozenset[str]:
        return frozenset(d.name for d in self.definitions)
