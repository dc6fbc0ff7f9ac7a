"""The vocabulary of the stub allow-list: node-shape predicates and the rejection they lead to."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable

__all__ = ["Reject", "dump_expr", "fail", "is_attr", "is_docstring", "is_name", "is_str"]


class Reject(Exception):
    def __init__(self, node: ast.AST | None, reason: str) -> None:
        super().__init__(reason)
        self.line = getattr(node, "lineno", None)
        self.reason = reason


def fail(node: ast.AST | None, reason: str) -> Reject:
    return Reject(node, reason)


@functools.cache
def dump_expr(source: str) -> str:
    return ast.dump(ast.parse(source, mode="eval").body)


def is_name(node: ast.AST | None, name: str | None = None) -> bool:
    return isinstance(node, ast.Name) and (name is None or node.id == name)


def is_attr(node: ast.AST | None, base: str, attrs: Iterable[str]) -> bool:
    return isinstance(node, ast.Attribute) and is_name(node.value, base) and node.attr in attrs


def is_str(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is str


def is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and is_str(node.value)
