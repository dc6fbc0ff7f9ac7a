"""Type definitions and type expressions in generated modules (see :mod:`._astcheck`).

A type may use only ``str int float bool list dict None``, the module's own type names,
``_t.Any/Never/Literal/NotRequired``, ``_rt.ResourceContents/PromptMessage`` (resource and
prompt modules), subscripts, ``|`` and literal scalars inside ``_t.Literal[...]``. Strings
(aliases, functional TypedDict fields, quoted annotations) are parsed and held to the same rules.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from typing import Final

from codemode.stubs._astcheck_shapes import fail, is_attr, is_docstring, is_name, is_str

__all__ = ["TypeChecker"]

_BUILTIN_TYPES: Final = frozenset(["str", "int", "float", "bool", "list", "dict"])
_TYPING_ATTRS: Final = frozenset(["Any", "Never", "Literal", "NotRequired"])
_RUNTIME_TYPES: Final = frozenset(["ResourceContents", "PromptMessage"])
_MAX_TYPE_DEPTH: Final = 64


@functools.lru_cache(maxsize=8192)
def _parse_type_string(text: str) -> ast.expr | None:
    # Cached: the same few type strings recur across thousands of modules. Callers never mutate it.
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


class TypeChecker:
    """Checks the type definitions and type expressions of one module of the given ``kind``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.names: set[str] = set()

    def collect_definitions(self, statements: Iterable[ast.stmt]) -> None:
        """Learn the module's type names up front, so annotations may refer to later definitions."""
        for stmt in statements:
            name = self._definition_name(stmt)
            if name is not None:
                if name in self.names:
                    raise fail(stmt, f"type {name!r} defined twice")
                self.names.add(name)

    def _definition_name(self, stmt: ast.stmt) -> str | None:
        if self.kind != "tool":
            return None
        if isinstance(stmt, ast.ClassDef):
            return stmt.name
        if isinstance(stmt, ast.AnnAssign) and is_name(stmt.target):
            assert isinstance(stmt.target, ast.Name)
            return stmt.target.id if is_attr(stmt.annotation, "_t", ["TypeAlias"]) else None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and is_name(stmt.targets[0]):
            target = stmt.targets[0]
            assert isinstance(target, ast.Name)
            if isinstance(stmt.value, ast.Call) and is_attr(stmt.value.func, "_t", ["TypedDict"]):
                return target.id
        return None

    def typeddict_class(self, stmt: ast.ClassDef) -> None:
        if self.kind != "tool":
            raise fail(stmt, "classes are only allowed in tool modules")
        if (
            stmt.decorator_list
            or stmt.keywords
            or len(stmt.bases) != 1
            or not is_attr(stmt.bases[0], "_t", ["TypedDict"])
            or getattr(stmt, "type_params", None)
        ):
            raise fail(stmt, "a class must be a plain '(_t.TypedDict)'")
        body = stmt.body[1:] if stmt.body and is_docstring(stmt.body[0]) else stmt.body
        for node in body:
            if not (
                isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is None
            ):
                raise fail(node, "a TypedDict body may only declare annotated fields")
            self.type_expr(node.annotation, field=True)

    def functional_typeddict(self, target: str, call: ast.Call) -> None:
        if not is_attr(call.func, "_t", ["TypedDict"]) or call.keywords or len(call.args) != 2:
            raise fail(call, "unexpected call at module level")
        name, fields = call.args
        if not (isinstance(name, ast.Constant) and name.value == target):
            raise fail(call, "functional TypedDict name must match its target")
        if not isinstance(fields, ast.Dict):
            raise fail(call, "functional TypedDict fields must be a dict literal")
        for key, value in zip(fields.keys, fields.values, strict=True):
            if not is_str(key) or not is_str(value):
                raise fail(call, "functional TypedDict fields must map string keys to type strings")
            assert isinstance(value, ast.Constant)
            self.type_string(value, field=True)

    def type_string(self, node: ast.Constant, *, field: bool = False) -> None:
        assert isinstance(node.value, str)
        expr = _parse_type_string(node.value)
        if expr is None:
            raise fail(node, "a type string does not parse")
        self.type_expr(expr, field=field)

    def type_expr(self, node: ast.expr, *, field: bool = False, depth: int = 0) -> None:
        if depth > _MAX_TYPE_DEPTH:
            raise fail(node, "type expression nested too deeply")
        if isinstance(node, ast.Constant):
            if node.value is None:
                return
            if isinstance(node.value, str):
                self.type_string(node, field=field)
                return
            raise fail(node, "unexpected constant in a type")
        if isinstance(node, ast.Name):
            if node.id in _BUILTIN_TYPES or node.id in self.names:
                return
            raise fail(node, f"unknown name {node.id!r} in a type")
        if isinstance(node, ast.Attribute):
            if is_attr(node, "_t", _TYPING_ATTRS - {"Literal", "NotRequired"}):
                return
            if is_attr(node, "_rt", _RUNTIME_TYPES) and self.kind in ("resources", "prompts"):
                return
            raise fail(node, "unexpected attribute in a type")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            self.type_expr(node.left, depth=depth + 1)
            self.type_expr(node.right, depth=depth + 1)
            return
        if isinstance(node, ast.Subscript):
            self.subscript(node, field=field, depth=depth)
            return
        raise fail(node, f"{type(node).__name__} is not allowed in a type")

    def subscript(self, node: ast.Subscript, *, field: bool, depth: int) -> None:
        base, index = node.value, node.slice
        if is_name(base, "list"):
            self.type_expr(index, depth=depth + 1)
            return
        if is_name(base, "dict"):
            if not (isinstance(index, ast.Tuple) and len(index.elts) == 2 and is_name(index.elts[0], "str")):
                raise fail(node, "dict types must be dict[str, T]")
            self.type_expr(index.elts[1], depth=depth + 1)
            return
        if is_attr(base, "_t", ["NotRequired"]) and field and depth == 0:
            self.type_expr(index, depth=depth + 1)
            return
        if is_attr(base, "_t", ["Literal"]):
            values = index.elts if isinstance(index, ast.Tuple) else [index]
            for value in values:
                literal = (
                    value.operand
                    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub)
                    else value
                )
                allowed = (int,) if literal is not value else (str, int, bool)  # -1 parses as USub(1)
                if not (isinstance(literal, ast.Constant) and type(literal.value) in allowed):
                    raise fail(value, "Literal values must be str, int or bool constants")
            return
        raise fail(node, "unexpected subscript in a type")
