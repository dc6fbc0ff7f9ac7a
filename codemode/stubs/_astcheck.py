"""Defence in depth: a rendered module must consist of exactly the expected node shapes.

The sanitiser and the templates are meant to make injection impossible; this check makes a
mistake in either of them fail loudly (``StubRenderError``) instead of shipping code. It is an
allow-list over the parsed module, not a deny-list:

module level (every kind)
    the module docstring first, ``from __future__ import annotations`` second; then only
    the imports of the kind (``typing as _t``, ``importlib as _importlib``,
    ``codemode_runtime as _rt``, ``from urllib.parse import quote as _quote``), and
    ``__server__`` / ``__tool__`` / ``__schema_hash__`` assigned a string constant.
tool modules
    ``class X(_t.TypedDict)`` with an optional docstring and annotated fields only;
    ``X = _t.TypedDict("X", {"key": "<type>", ...})``; ``X: _t.TypeAlias = "<type>"``; and one
    function named like the module: keyword-only parameters with type annotations and scalar
    defaults, body = docstring, ``_arguments: dict[str, _t.Any] = {"key": param, ...}`` (or a
    parameter), ``if param is not None: _arguments["key"] = param`` and
    ``return _rt.call_tool(__server__, __tool__, __schema_hash__, _arguments)`` (plus
    ``idempotency_key=_idempotency_key`` exactly when the function has that parameter).
package ``__init__`` modules
    ``__all__: list[str] = [<identifiers>]``, ``if _t.TYPE_CHECKING:`` re-exports of exactly
    those names, and the lazy ``__getattr__`` / ``__dir__`` (plus, in a server package, the
    ``_Package`` module class and its installation) which must equal the canonical source
    below node for node.
``_resources`` / ``_prompts``
    functions whose body is a docstring plus ``return _rt.read_resource(__server__, <uri>)``
    (string constants, parameters and ``_quote(param, safe="...")`` joined by ``+``), or the
    prompt form of the tool body ending in ``return _rt.get_prompt(__server__, "<name>", _arguments)``.

Type expressions (annotations, alias and functional-TypedDict strings, which are parsed and
checked too) may use only ``str int float bool list dict None``, the module's own type names,
``_t.Any/Never/Literal/NotRequired``, ``_rt.ResourceContents/PromptMessage``, subscripts, ``|``
and literal scalars inside ``_t.Literal[...]`` - never a call, attribute chain or lambda, so
even ``typing.get_type_hints`` evaluates nothing foreign.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Sequence
from typing import Final

from codemode.errors import StubRenderError

__all__ = [
    "check_package_init",
    "check_prompts_module",
    "check_resources_module",
    "check_tool_module",
]

# Python reads a source-encoding declaration from the first two lines of a file, even inside a
# string; the templates keep those lines to fixed text, and this makes sure of it.
_CODING_COOKIE: Final = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+", re.MULTILINE)

_BUILTIN_TYPES: Final = frozenset(["str", "int", "float", "bool", "list", "dict"])
_TYPING_ATTRS: Final = frozenset(["Any", "Never", "Literal", "NotRequired"])
_RUNTIME_TYPES: Final = frozenset(["ResourceContents", "PromptMessage"])
_MAX_TYPE_DEPTH: Final = 64
_PROVENANCE: Final = frozenset(["__server__", "__tool__", "__schema_hash__"])
# ``import <module> as <alias>`` statements each kind of module may contain.
_IMPORTS: Final[dict[str, frozenset[tuple[str, str]]]] = {
    "tool": frozenset([("typing", "_t"), ("codemode_runtime", "_rt")]),
    "root": frozenset([("typing", "_t"), ("importlib", "_importlib")]),
    "package": frozenset(
        [("typing", "_t"), ("importlib", "_importlib"), ("sys", "_sys"), ("types", "_types")]
    ),
    "resources": frozenset([("codemode_runtime", "_rt")]),
    "prompts": frozenset([("codemode_runtime", "_rt")]),
}

_PACKAGE_FUNCTIONS_SOURCE: Final = """
class _Package(_types.ModuleType):
    def __setattr__(self, name: str, value: object) -> None:
        if name in __all__ and isinstance(value, _types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> _t.Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(f"{__name__}.{name}"), name)


def __dir__() -> list[str]:
    return list(__all__)
"""

_ROOT_FUNCTIONS_SOURCE: Final = """
def __getattr__(name: str) -> _t.Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _importlib.import_module(f"{__name__}.{name}")


def __dir__() -> list[str]:
    return list(__all__)
"""


class _Reject(Exception):
    def __init__(self, node: ast.AST | None, reason: str) -> None:
        super().__init__(reason)
        self.line = getattr(node, "lineno", None)
        self.reason = reason


def _fail(node: ast.AST | None, reason: str) -> _Reject:
    return _Reject(node, reason)


def _parse(source: str, what: str) -> ast.Module:
    head = "\n".join(source.split("\n", 2)[:2])
    if _CODING_COOKIE.search(head):
        raise StubRenderError(f"{what}: an encoding declaration in the first two lines")
    if "\x00" in source:
        raise StubRenderError(f"{what}: NUL character in the source")
    try:
        return ast.parse(source, filename=what, type_comments=False)
    except SyntaxError as exc:
        raise StubRenderError(
            f"{what}: rendered source does not parse ({exc.msg}, line {exc.lineno})"
        ) from exc


def _run(source: str, what: str, check: _Checker) -> None:
    tree = _parse(source, what)
    try:
        check.module(tree)
    except _Reject as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise StubRenderError(f"{what}: refused by the stub allow-list{where}: {exc.reason}") from None


def check_tool_module(source: str, ident: str) -> None:
    _run(source, f"tool module {ident!r}", _Checker("tool", function_names={ident}))


def check_package_init(source: str, *, package: str, names: Sequence[str]) -> None:
    kind = "root" if package == "servers" else "package"
    _run(source, f"package {package!r}", _Checker(kind, package=package, exports=list(names)))


def check_resources_module(source: str) -> None:
    _run(source, "resources module", _Checker("resources"))


def check_prompts_module(source: str) -> None:
    _run(source, "prompts module", _Checker("prompts"))


@functools.cache
def _dump_expr(source: str) -> str:
    return ast.dump(ast.parse(source, mode="eval").body)


@functools.lru_cache(maxsize=8192)
def _parse_type_string(text: str) -> ast.expr | None:
    # Cached: the same few type strings recur across thousands of modules. Callers never mutate it.
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


@functools.cache
def _canonical_functions(root: bool) -> dict[str, str]:
    module = ast.parse(_ROOT_FUNCTIONS_SOURCE if root else _PACKAGE_FUNCTIONS_SOURCE)
    return {
        node.name: ast.dump(node) for node in module.body if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }


@functools.cache
def _canonical_package_statements() -> frozenset[str]:
    module = ast.parse(_PACKAGE_FUNCTIONS_SOURCE)
    return frozenset(ast.dump(node) for node in module.body if isinstance(node, ast.Assign))


def _is_name(node: ast.AST | None, name: str | None = None) -> bool:
    return isinstance(node, ast.Name) and (name is None or node.id == name)


def _is_attr(node: ast.AST | None, base: str, attrs: Iterable[str]) -> bool:
    return isinstance(node, ast.Attribute) and _is_name(node.value, base) and node.attr in attrs


def _is_str(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is str


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and _is_str(node.value)


class _Checker:
    def __init__(
        self,
        kind: str,
        *,
        function_names: set[str] | None = None,
        package: str = "",
        exports: list[str] | None = None,
    ) -> None:
        self.kind = kind
        self.function_names = function_names or set()
        self.package = package
        self.exports = exports or []
        self.type_names: set[str] = set()
        self.allowed_imports = _IMPORTS[kind]

    # -- module -------------------------------------------------------------------------------

    def module(self, tree: ast.Module) -> None:
        body = tree.body
        if len(body) < 2 or not _is_docstring(body[0]):
            raise _fail(None, "the module must start with its docstring")
        future = body[1]
        if not (
            isinstance(future, ast.ImportFrom)
            and future.module == "__future__"
            and future.level == 0
            and [(a.name, a.asname) for a in future.names] == [("annotations", None)]
        ):
            raise _fail(future, "the second statement must be 'from __future__ import annotations'")
        # Type names first, so annotations may refer to definitions further down.
        for stmt in body[2:]:
            name = self._type_definition_name(stmt)
            if name is not None:
                if name in self.type_names:
                    raise _fail(stmt, f"type {name!r} defined twice")
                self.type_names.add(name)
        functions: list[str] = []
        for stmt in body[2:]:
            if isinstance(stmt, ast.FunctionDef) or (
                self.kind == "package" and isinstance(stmt, ast.ClassDef)
            ):
                functions.append(stmt.name)
                self.function(stmt)
            elif (
                self.kind == "package"
                and isinstance(stmt, ast.Assign)
                and ast.dump(stmt) in _canonical_package_statements()
            ):
                continue
            else:
                self.statement(stmt)
        if self.kind == "tool" and sorted(functions) != sorted(self.function_names):
            raise _fail(
                None, f"expected exactly the function(s) {sorted(self.function_names)}, got {functions}"
            )
        expected = ["__dir__", "__getattr__"] + (["_Package"] if self.kind == "package" else [])
        if self.kind in ("root", "package") and sorted(functions) != sorted(expected):
            raise _fail(None, f"a package defines exactly {', '.join(expected)}")
        if len(set(functions)) != len(functions):
            raise _fail(None, "a function is defined twice")

    def _type_definition_name(self, stmt: ast.stmt) -> str | None:
        if self.kind != "tool":
            return None
        if isinstance(stmt, ast.ClassDef):
            return stmt.name
        if isinstance(stmt, ast.AnnAssign) and _is_name(stmt.target):
            assert isinstance(stmt.target, ast.Name)
            return stmt.target.id if _is_attr(stmt.annotation, "_t", ["TypeAlias"]) else None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _is_name(stmt.targets[0]):
            target = stmt.targets[0]
            assert isinstance(target, ast.Name)
            if isinstance(stmt.value, ast.Call) and _is_attr(stmt.value.func, "_t", ["TypedDict"]):
                return target.id
        return None

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Import):
            pairs = {(a.name, a.asname) for a in stmt.names}
            if len(stmt.names) != 1 or not pairs <= self.allowed_imports:
                raise _fail(stmt, "unexpected import")
            return
        if isinstance(stmt, ast.ImportFrom):
            names = [(a.name, a.asname) for a in stmt.names]
            if not (
                self.kind == "resources"
                and stmt.module == "urllib.parse"
                and stmt.level == 0
                and names == [("quote", "_quote")]
            ):
                raise _fail(stmt, "unexpected import")
            return
        if isinstance(stmt, ast.Assign):
            self.assign(stmt)
            return
        if isinstance(stmt, ast.AnnAssign):
            self.ann_assign(stmt)
            return
        if isinstance(stmt, ast.ClassDef):
            self.typeddict_class(stmt)
            return
        if isinstance(stmt, ast.If):
            self.type_checking_block(stmt)
            return
        raise _fail(stmt, f"statement {type(stmt).__name__} is not allowed at module level")

    def assign(self, stmt: ast.Assign) -> None:
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            raise _fail(stmt, "only simple assignments are allowed")
        target = stmt.targets[0].id
        if target in _PROVENANCE:
            allowed = _PROVENANCE if self.kind == "tool" else {"__server__"}
            if target not in allowed or not _is_str(stmt.value):
                raise _fail(stmt, f"{target} must be a string constant")
            return
        if self.kind == "tool" and isinstance(stmt.value, ast.Call):
            self.functional_typeddict(target, stmt.value)
            return
        raise _fail(stmt, f"assignment to {target!r} is not allowed")

    def ann_assign(self, stmt: ast.AnnAssign) -> None:
        if not isinstance(stmt.target, ast.Name) or stmt.value is None:
            raise _fail(stmt, "unexpected annotated assignment")
        target = stmt.target.id
        if target == "__all__" and self.kind in ("root", "package"):
            if ast.dump(stmt.annotation) != _dump_expr("list[str]"):
                raise _fail(stmt, "__all__ must be annotated list[str]")
            value = stmt.value
            if not isinstance(value, ast.List) or not all(_is_str(e) for e in value.elts):
                raise _fail(stmt, "__all__ must be a list of string constants")
            names = [e.value for e in value.elts if isinstance(e, ast.Constant)]
            if names != self.exports:
                raise _fail(stmt, "__all__ does not list exactly the expected names")
            return
        if self.kind == "tool" and _is_attr(stmt.annotation, "_t", ["TypeAlias"]):
            if not (isinstance(stmt.value, ast.Constant) and type(stmt.value.value) is str):
                raise _fail(stmt, "a type alias must be a string")
            self.type_string(stmt.value)
            return
        raise _fail(stmt, f"annotated assignment to {target!r} is not allowed")

    def type_checking_block(self, stmt: ast.If) -> None:
        if (
            self.kind not in ("root", "package")
            or not _is_attr(stmt.test, "_t", ["TYPE_CHECKING"])
            or stmt.orelse
        ):
            raise _fail(stmt, "only 'if _t.TYPE_CHECKING:' re-exports are allowed")
        seen: list[str] = []
        for node in stmt.body:
            if not isinstance(node, ast.ImportFrom) or node.level != 0 or len(node.names) != 1:
                raise _fail(node, "TYPE_CHECKING may only re-export names")
            alias = node.names[0]
            if alias.name != alias.asname or alias.name not in self.exports:
                raise _fail(node, "TYPE_CHECKING re-exports must be 'import x as x' of an exported name")
            expected_module = self.package if self.kind == "root" else f"{self.package}.{alias.name}"
            if node.module != expected_module:
                raise _fail(node, f"re-export from unexpected module {node.module!r}")
            seen.append(alias.name)
        if seen != self.exports:
            raise _fail(stmt, "TYPE_CHECKING must re-export exactly the names in __all__")

    # -- types --------------------------------------------------------------------------------

    def typeddict_class(self, stmt: ast.ClassDef) -> None:
        if self.kind != "tool":
            raise _fail(stmt, "classes are only allowed in tool modules")
        if (
            stmt.decorator_list
            or stmt.keywords
            or len(stmt.bases) != 1
            or not _is_attr(stmt.bases[0], "_t", ["TypedDict"])
            or getattr(stmt, "type_params", None)
        ):
            raise _fail(stmt, "a class must be a plain '(_t.TypedDict)'")
        body = stmt.body[1:] if stmt.body and _is_docstring(stmt.body[0]) else stmt.body
        for node in body:
            if not (
                isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is None
            ):
                raise _fail(node, "a TypedDict body may only declare annotated fields")
            self.type_expr(node.annotation, field=True)

    def functional_typeddict(self, target: str, call: ast.Call) -> None:
        if not _is_attr(call.func, "_t", ["TypedDict"]) or call.keywords or len(call.args) != 2:
            raise _fail(call, "unexpected call at module level")
        name, fields = call.args
        if not (isinstance(name, ast.Constant) and name.value == target):
            raise _fail(call, "functional TypedDict name must match its target")
        if not isinstance(fields, ast.Dict):
            raise _fail(call, "functional TypedDict fields must be a dict literal")
        for key, value in zip(fields.keys, fields.values, strict=True):
            if not _is_str(key) or not _is_str(value):
                raise _fail(call, "functional TypedDict fields must map string keys to type strings")
            assert isinstance(value, ast.Constant)
            self.type_string(value, field=True)

    def type_string(self, node: ast.Constant, *, field: bool = False) -> None:
        assert isinstance(node.value, str)
        expr = _parse_type_string(node.value)
        if expr is None:
            raise _fail(node, "a type string does not parse")
        self.type_expr(expr, field=field)

    def type_expr(self, node: ast.expr, *, field: bool = False, depth: int = 0) -> None:
        if depth > _MAX_TYPE_DEPTH:
            raise _fail(node, "type expression nested too deeply")
        if isinstance(node, ast.Constant):
            if node.value is None:
                return
            if isinstance(node.value, str):
                self.type_string(node, field=field)
                return
            raise _fail(node, "unexpected constant in a type")
        if isinstance(node, ast.Name):
            if node.id in _BUILTIN_TYPES or node.id in self.type_names:
                return
            raise _fail(node, f"unknown name {node.id!r} in a type")
        if isinstance(node, ast.Attribute):
            if _is_attr(node, "_t", _TYPING_ATTRS - {"Literal", "NotRequired"}):
                return
            if _is_attr(node, "_rt", _RUNTIME_TYPES) and self.kind in ("resources", "prompts"):
                return
            raise _fail(node, "unexpected attribute in a type")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            self.type_expr(node.left, depth=depth + 1)
            self.type_expr(node.right, depth=depth + 1)
            return
        if isinstance(node, ast.Subscript):
            self.subscript(node, field=field, depth=depth)
            return
        raise _fail(node, f"{type(node).__name__} is not allowed in a type")

    def subscript(self, node: ast.Subscript, *, field: bool, depth: int) -> None:
        base, index = node.value, node.slice
        if _is_name(base, "list"):
            self.type_expr(index, depth=depth + 1)
            return
        if _is_name(base, "dict"):
            if not (isinstance(index, ast.Tuple) and len(index.elts) == 2 and _is_name(index.elts[0], "str")):
                raise _fail(node, "dict types must be dict[str, T]")
            self.type_expr(index.elts[1], depth=depth + 1)
            return
        if _is_attr(base, "_t", ["NotRequired"]) and field and depth == 0:
            self.type_expr(index, depth=depth + 1)
            return
        if _is_attr(base, "_t", ["Literal"]):
            values = index.elts if isinstance(index, ast.Tuple) else [index]
            for value in values:
                literal = (
                    value.operand
                    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub)
                    else value
                )
                allowed = (int,) if literal is not value else (str, int, bool)  # -1 parses as USub(1)
                if not (isinstance(literal, ast.Constant) and type(literal.value) in allowed):
                    raise _fail(value, "Literal values must be str, int or bool constants")
            return
        raise _fail(node, "unexpected subscript in a type")

    # -- functions ----------------------------------------------------------------------------

    def function(self, node: ast.FunctionDef | ast.ClassDef) -> None:
        if self.kind in ("root", "package"):
            canonical = _canonical_functions(self.kind == "root").get(node.name)
            if canonical is None or ast.dump(node) != canonical:
                raise _fail(node, f"package definition {node.name!r} differs from the canonical one")
            return
        assert isinstance(node, ast.FunctionDef)
        if node.decorator_list or getattr(node, "type_params", None):
            raise _fail(node, "decorators are not allowed")
        if self.kind == "tool" and node.name not in self.function_names:
            raise _fail(node, f"unexpected function {node.name!r}")
        if node.name.startswith("_"):
            raise _fail(node, "generated function names never start with '_'")
        params = self.signature(node)
        if node.returns is None:
            raise _fail(node, "missing return annotation")
        self.type_expr(node.returns)
        body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
        if self.kind == "tool":
            self.call_body(node, body, params, dict_value="_t.Any", call="call_tool")
        elif self.kind == "prompts":
            self.call_body(node, body, params, dict_value="str", call="get_prompt")
        else:
            self.resource_body(node, body, params)

    def signature(self, node: ast.FunctionDef) -> set[str]:
        args = node.args
        if args.posonlyargs or args.args or args.vararg or args.kwarg or args.defaults:
            raise _fail(node, "only keyword-only parameters are allowed")
        names: set[str] = set()
        for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            if arg.annotation is None:
                raise _fail(arg, "parameters must be annotated")
            if arg.arg.startswith("_") and arg.arg != "_idempotency_key":
                raise _fail(arg, f"parameter {arg.arg!r} starts with '_'")
            self.type_expr(arg.annotation)
            if default is not None and not _is_scalar_constant(default):
                raise _fail(default, "defaults must be scalar constants")
            names.add(arg.arg)
        if "_idempotency_key" in names and self.kind != "tool":
            raise _fail(node, "_idempotency_key is only for tools")
        return names

    def call_body(
        self, node: ast.FunctionDef, body: list[ast.stmt], params: set[str], *, dict_value: str, call: str
    ) -> None:
        if len(body) < 2:
            raise _fail(node, "unexpected function body")
        first, *middle, last = body
        expected_annotation = _dump_expr(f"dict[str, {dict_value}]")
        if not (
            isinstance(first, ast.AnnAssign)
            and _is_name(first.target, "_arguments")
            and ast.dump(first.annotation) == expected_annotation
        ):
            raise _fail(first, "the body must start by building _arguments")
        value = first.value
        if isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values, strict=True):
                if not _is_str(key) or not (isinstance(item, ast.Name) and item.id in params):
                    raise _fail(value, "_arguments may only map string keys to parameters")
        elif not (call == "call_tool" and isinstance(value, ast.Name) and value.id in params):
            raise _fail(first, "_arguments must be a dict literal")
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
            raise _fail(stmt, "only 'if param is not None: _arguments[key] = param' is allowed here")
        assert isinstance(stmt, ast.If)
        assert isinstance(stmt.test, ast.Compare)
        assign = stmt.body[0]
        tested = stmt.test.left
        assert isinstance(tested, ast.Name)
        if not (
            isinstance(assign, ast.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0], ast.Subscript)
            and _is_name(assign.targets[0].value, "_arguments")
            and _is_str(assign.targets[0].slice)
            and _is_name(assign.value, tested.id)
        ):
            raise _fail(stmt, "only '_arguments[key] = param' is allowed in the condition")

    def runtime_return(self, stmt: ast.stmt, params: set[str], call: str) -> None:
        if not (isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Call)):
            raise _fail(stmt, "the body must end by returning the runtime call")
        value = stmt.value
        if not _is_attr(value.func, "_rt", [call]):
            raise _fail(stmt, f"the body must return _rt.{call}(...)")
        args = value.args
        if call == "call_tool":
            names = [a.id if isinstance(a, ast.Name) else None for a in args]
            if names != ["__server__", "__tool__", "__schema_hash__", "_arguments"]:
                raise _fail(stmt, "call_tool must pass __server__, __tool__, __schema_hash__, _arguments")
            keywords = [(k.arg, k.value) for k in value.keywords]
            if "_idempotency_key" in params:
                if not (
                    len(keywords) == 1
                    and keywords[0][0] == "idempotency_key"
                    and _is_name(keywords[0][1], "_idempotency_key")
                ):
                    raise _fail(stmt, "call_tool must pass idempotency_key=_idempotency_key")
            elif keywords:
                raise _fail(stmt, "unexpected keyword arguments")
            return
        # get_prompt(__server__, "<name>", _arguments)
        if not (
            len(args) == 3
            and _is_name(args[0], "__server__")
            and _is_str(args[1])
            and _is_name(args[2], "_arguments")
            and not value.keywords
        ):
            raise _fail(stmt, "get_prompt must pass __server__, the prompt name and _arguments")

    def resource_body(self, node: ast.FunctionDef, body: list[ast.stmt], params: set[str]) -> None:
        if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
            raise _fail(node, "a resource function only returns _rt.read_resource(...)")
        call = body[0].value
        if not (
            _is_attr(call.func, "_rt", ["read_resource"])
            and len(call.args) == 2
            and not call.keywords
            and _is_name(call.args[0], "__server__")
        ):
            raise _fail(node, "a resource function only returns _rt.read_resource(__server__, uri)")
        self.uri_expr(call.args[1], params)

    def uri_expr(self, node: ast.expr, params: set[str]) -> None:
        if _is_str(node) or (isinstance(node, ast.Name) and node.id in params):
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            self.uri_expr(node.left, params)
            self.uri_expr(node.right, params)
            return
        if (
            isinstance(node, ast.Call)
            and _is_name(node.func, "_quote")
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in params
            and len(node.keywords) == 1
            and node.keywords[0].arg == "safe"
            and _is_str(node.keywords[0].value)
        ):
            return
        raise _fail(node, "a resource URI may only join strings, parameters and _quote(param)")


def _is_scalar_constant(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) in (int, float)
    return isinstance(node, ast.Constant) and (
        node.value is None or type(node.value) in (str, int, float, bool)
    )
