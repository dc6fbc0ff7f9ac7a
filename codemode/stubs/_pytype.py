"""Python type expressions: :class:`PyType` values and the normalised unions they form.

A :class:`PyType` carries its rendered text, computed bottom-up once. Composite texts are
capped at :data:`MAX_EXPR_CHARS` (the result is then :data:`OVERSIZED`), so a type that would
spell out exponentially (a DAG of ``$ref`` s) costs neither exponential time nor memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

__all__ = [
    "ANY",
    "BOOL",
    "DICT_ANY",
    "FLOAT",
    "INT",
    "LIST_ANY",
    "MAX_EXPR_CHARS",
    "MAX_UNION",
    "NEVER",
    "NONE",
    "OVERSIZED",
    "STR",
    "LiteralValue",
    "PyType",
    "dict_of",
    "list_of",
    "literal",
    "named",
    "union",
]

MAX_UNION: Final = 24
MAX_EXPR_CHARS: Final = 2_000

LiteralValue = str | int | bool


class PyType:
    """A Python type expression with its source text (``_t`` is the module's ``typing`` alias)."""

    __slots__ = ("kind", "literals", "members", "text")

    def __init__(
        self,
        kind: str,
        text: str,
        members: tuple[PyType, ...] = (),
        literals: tuple[LiteralValue, ...] = (),
    ) -> None:
        self.kind = kind
        self.text = text
        self.members = members
        self.literals = literals

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PyType) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"PyType({self.text!r})"

    def accepts(self, value: object) -> bool:
        """Whether the JSON scalar ``value`` is a valid Python value of this type (for defaults)."""
        kind = self.kind
        if kind == "any":
            return True
        if kind == "union":
            return any(member.accepts(value) for member in self.members)
        if kind == "literal":
            return any(type(lit) is type(value) and lit == value for lit in self.literals)
        if kind == "float":
            return type(value) in (int, float)
        expected = {"str": str, "int": int, "bool": bool, "none": type(None)}.get(kind)
        return expected is not None and type(value) is expected


ANY: Final = PyType("any", "_t.Any")
OVERSIZED: Final = PyType("any", "_t.Any")
"""Returned instead of a type whose text would exceed :data:`MAX_EXPR_CHARS`."""
NEVER: Final = PyType("never", "_t.Never")
NONE: Final = PyType("none", "None")
STR: Final = PyType("str", "str")
INT: Final = PyType("int", "int")
FLOAT: Final = PyType("float", "float")
BOOL: Final = PyType("bool", "bool")
DICT_ANY: Final = PyType("dict", "dict[str, _t.Any]")
LIST_ANY: Final = PyType("list", "list[_t.Any]")


def _capped(
    kind: str, text: str, members: tuple[PyType, ...] = (), literals: tuple[LiteralValue, ...] = ()
) -> PyType:
    if len(text) > MAX_EXPR_CHARS:
        return OVERSIZED
    return PyType(kind, text, members, literals)


def list_of(item: PyType) -> PyType:
    return _capped("list", f"list[{item.text}]", (item,))


def dict_of(value: PyType) -> PyType:
    return _capped("dict", f"dict[str, {value.text}]", (value,))


def named(name: str) -> PyType:
    return PyType("named", name)


def literal(values: Sequence[LiteralValue]) -> PyType:
    unique: list[LiteralValue] = []
    seen: set[tuple[type, LiteralValue]] = set()
    for value in values:
        key = (type(value), value)  # 1 == True in Python; Literal[1] and Literal[True] differ
        if key not in seen:
            seen.add(key)
            unique.append(value)
    text = "_t.Literal[" + ", ".join(repr(v) for v in unique) + "]"
    return _capped("literal", text, literals=tuple(unique))


def union(members: Iterable[PyType]) -> PyType:
    """A normalised union: flattened, deduplicated, literals merged, ``None`` last."""
    flat: list[PyType] = []
    for member in members:
        flat.extend(member.members if member.kind == "union" else (member,))
    if any(m.kind == "any" for m in flat):
        return ANY
    flat = [m for m in flat if m.kind != "never"] or [NEVER]
    kinds = {m.kind for m in flat}
    literal_values: list[LiteralValue] = []
    rest: dict[PyType, None] = {}  # ordered, and a member test in constant time (wide unions)
    for member in flat:
        if member.kind == "literal":
            literal_values.extend(member.literals)
        elif member.kind != "none":
            rest.setdefault(member)
            if len(rest) > MAX_UNION:
                return ANY
    # A literal value adds nothing next to its base type (Literal['a'] | str is str).
    covered = {"str": str, "int": int, "bool": bool}
    literal_values = [
        v
        for v in literal_values
        if not any(kind in kinds and type(v) is tp for kind, tp in covered.items())
        and not ("float" in kinds and type(v) is int)
    ]
    result = list(rest)
    if literal_values:
        result = [*rest, literal(literal_values)]
    if "none" in kinds:
        result = [*result, NONE]
    if not result:
        return NEVER
    if len(result) == 1:
        return result[0]
    if len(result) > MAX_UNION:
        return ANY
    return _capped("union", " | ".join(m.text for m in result), tuple(result))
