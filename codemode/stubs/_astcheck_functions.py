"""The generated functions of tool, resource and prompt modules (see :mod:`._astcheck`).

Keyword-only, annotated parameters with scalar defaults, and a body that only builds the
arguments and returns the one runtime call the module kind makes.
"""

from __future__ import annotations

import ast

from codemode.stubs._astcheck_shapes import dump_expr, fail, is_attr, is_docstring, is_name, is_str
from codemode.stubs._astcheck_types import TypeChecker

__all__ = ["FunctionChecker"]


class FunctionChecker:
    """Checks the functions of one tool, ``_resources`` or ``_prompts`` module."""

    def __init__(self, kind: str, function_names: set[str], types: TypeChecker) -> None:
        self.kind = kind
        self.function_names = function_names
        self.types = types

    def function(self, node: ast.FunctionDef) -> None:
        if node.decorator_list or getattr(node, "type_params", None):
            raise fail(node, "decorators are not allowed")
        if self.kind == "tool" and node.name not in self.function_names:
            raise fail(node, f"unexpected function {node.name!r}")
        if node.name.startswith("_"):
            raise fail(node, "generated function names never start with '_'")
        params = self.signature(node)
        if node.returns is None:
            raise fail(node, "missing return annotation")
        self.types.type_expr(node.returns)
        body = node.body[1:] if node.body and is_docstring(node.body[0]) else node.body
        if self.kind == "tool":
            self.call_body(node, body, params, dict_value="_t.Any", call="call_tool")
        elif self.kind == "prompts":
            self.call_body(node, body, params, dict_value="str", call="get_prompt")
        else:
            self.resource_body(node, body, params)

    def signature(self, node: ast.FunctionDef) -> set[str]:
        args = node.args
        if args.posonlyargs or args.args or args.vararg or args.kwarg or args.defaults:
            raise fail(node, "only keyword-only parameters are allowed")
        names: set[str] = set()
        for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            if arg.annotation is None:
                raise fail(arg, "parameters must be annotated")
            if arg.arg.startswith("_") and arg.arg != "_idempotency_key":
                raise fail(arg, f"parameter {arg.arg!r} starts with '_'")
            self.types.type_expr(arg.annotation)
            if default is not None and not _is_scalar_constant(default):
                raise fail(default, "defaults must be scalar constants")
            names.add(arg.arg)
        if "_idempotency_key" in names and self.kind != "tool":
            raise fail(node, "_idempotency_key is only for tools")
        return names

    def call_body(
        self, node: ast.FunctionDef, body: list[ast.stmt], params: set[str], *, dict_value: str, call: str
    ) -> None:
        if len(body) < 2:
            raise fail(node, "unexpected function body")
        first, *middle, last = body
        expected_annotation = dump_expr(f"dict[str, {dict_value}]")
        if not (
            isinstance(first, ast.AnnAssign)
            and is_name(first.target, "_arguments")
            and ast.dump(first.annotation) == expected_annotation
        ):
            raise fail(first, "the body must start by building _arguments")
        value = first.value
        if isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values, strict=True):
                if not is_str(key) or not (isinstance(item, ast.Name) and item.id in params):
                    raise fail(value, "_arguments may only map string keys to parameters")
        elif not (call == "call_tool" and isinstance(value, ast.Name) and value.id in params):
            raise fail(first, "_arguments must be a dict literal")
        for stmt in middle:
            self.conditional_argument(stmt, params)
        self.runtime_return(last, params, call)

    def conditional_argument(self, stmt: ast.stmt, params: set[str]) -> None:
        ok = (
            isinstance(stmt, ast.If)
            and not stmt.orelse
            and isinstance(stmt.test, ast.Compare)
            and isinstance(stmt.test.left, ast.Name)
            and stmt.test.left.id in params
            and len(stmt.test.ops) == 1
            and isinstance(stmt.test.ops[0], ast.IsNot)
            and len(stmt.test.comparators) == 1
            and isinstance(stmt.test.comparators[0], ast.Constant)
            and stmt.test.comparators[0].value is None
            and len(stmt.body) == 1
        )
        if not ok:
            raise fail(stmt, "only 'if param is not None: _arguments[key] = param' is allowed here")
        assert isinstance(stmt, ast.If)
        assert isinstance(stmt.test, ast.Compare)
        assign = stmt.body[0]
        tested = stmt.test.left
        assert isinstance(tested, ast.Name)
        if not (
            isinstance(assign, ast.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0], ast.Subscript)
            and is_name(assign.targets[0].value, "_arguments")
            and is_str(assign.targets[0].slice)
            and is_name(assign.value, tested.id)
        ):
            raise fail(stmt, "only '_arguments[key] = param' is allowed in the condition")

    def runtime_return(self, stmt: ast.stmt, params: set[str], call: str) -> None:
        if not (isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Call)):
            raise fail(stmt, "the body must end by returning the runtime call")
        value = stmt.value
        if not is_attr(value.func, "_rt", [call]):
            raise fail(stmt, f"the body must return _rt.{call}(...)")
        args = value.args
        if call == "call_tool":
            names = [a.id if isinstance(a, ast.Name) else None for a in args]
            if names != ["__server__", "__tool__", "__schema_hash__", "_arguments"]:
                raise fail(stmt, "call_tool must pass __server__, __tool__, __schema_hash__, _arguments")
            keywords = [(k.arg, k.value) for k in value.keywords]
            if "_idempotency_key" in params:
                if not (
                    len(keywords) == 1
                    and keywords[0][0] == "idempotency_key"
                    and is_name(keywords[0][1], "_idempotency_key")
                ):
                    raise fail(stmt, "call_tool must pass idempotency_key=_idempotency_key")
            elif keywords:
                raise fail(stmt, "unexpected keyword arguments")
            return
        # get_prompt(__server__, "<name>", _arguments)
        if not (
            len(args) == 3
            and is_name(args[0], "__server__")
            and is_str(args[1])
            and is_name(args[2], "_arguments")
            and not value.keywords
        ):
            raise fail(stmt, "get_prompt must pass __server__, the prompt name and _arguments")

    def resource_body(self, node: ast.FunctionDef, body: list[ast.stmt], params: set[str]) -> None:
        if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
            raise fail(node, "a resource function only returns _rt.read_resource(...)")
        call = body[0].value
        if not (
            is_attr(call.func, "_rt", ["read_resource"])
            and len(call.args) == 2
            and not call.keywords
            and is_name(call.args[0], "__server__")
        ):
            raise fail(node, "a resource function only returns _rt.read_resource(__server__, uri)")
        self.uri_expr(call.args[1], params)

    def uri_expr(self, root: ast.expr, params: set[str]) -> None:
        # Iterative: a long chain of "+" nests as deep as it is long.
        pending = [root]
        while pending:
            node = pending.pop()
            if is_str(node) or (isinstance(node, ast.Name) and node.id in params):
                continue
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                pending += (node.left, node.right)
                continue
            if (
                isinstance(node, ast.Call)
                and is_name(node.func, "_quote")
                and len(node.args) == 1
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in params
                and len(node.keywords) == 1
                and node.keywords[0].arg == "safe"
                and is_str(node.keywords[0].value)
            ):
                continue
            raise fail(node, "a resource URI may only join strings, parameters and _quote(param)")


def _is_scalar_constant(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) in (int, float)
    return isinstance(node, ast.Constant) and (
        node.value is None or type(node.value) in (str, int, float, bool)
    )
