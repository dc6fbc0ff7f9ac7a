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
from collections.abc import Sequence
from typing import Final

from codemode.errors import StubRenderError
from codemode.stubs._astcheck_functions import FunctionChecker
from codemode.stubs._astcheck_shapes import Reject, dump_expr, fail, is_attr, is_docstring, is_str
from codemode.stubs._astcheck_types import TypeChecker

__all__ = [
    "check_package_init",
    "check_prompts_module",
    "check_resources_module",
    "check_tool_module",
]

# Python reads a source-encoding declaration from the first two lines of a file, even inside a
# string; the templates keep those lines to fixed text, and this makes sure of it.
_CODING_COOKIE: Final = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+", re.MULTILINE)

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
        if not name.startswith("_"):
            try:
                _importlib.import_module(f"{__name__}.{name}")
            except ImportError as exc:
                raise AttributeError(str(exc)) from None
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(f"{__name__}.{name}"), name)


def __dir__() -> list[str]:
    return list(__all__)
"""

_ROOT_FUNCTIONS_SOURCE: Final = """
def __getattr__(name: str) -> _t.Any:
    if name not in __all__:
        if not name.startswith("_"):
            try:
                _importlib.import_module(f"{__name__}.{name}")
            except ImportError as exc:
                raise AttributeError(str(exc)) from None
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _importlib.import_module(f"{__name__}.{name}")


def __dir__() -> list[str]:
    return list(__all__)
"""


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
    except Reject as exc:
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
def _canonical_functions(root: bool) -> dict[str, str]:
    module = ast.parse(_ROOT_FUNCTIONS_SOURCE if root else _PACKAGE_FUNCTIONS_SOURCE)
    return {
        node.name: ast.dump(node) for node in module.body if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }


@functools.cache
def _canonical_package_statements() -> frozenset[str]:
    module = ast.parse(_PACKAGE_FUNCTIONS_SOURCE)
    return frozenset(ast.dump(node) for node in module.body if isinstance(node, ast.Assign))


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
        self.package = package
        self.exports = exports or []
        self.allowed_imports = _IMPORTS[kind]
        self.types = TypeChecker(kind)
        self.functions = FunctionChecker(kind, function_names or set(), self.types)

    # -- module -------------------------------------------------------------------------------

    def module(self, tree: ast.Module) -> None:
        body = tree.body
        if len(body) < 2 or not is_docstring(body[0]):
            raise fail(None, "the module must start with its docstring")
        future = body[1]
        if not (
            isinstance(future, ast.ImportFrom)
            and future.module == "__future__"
            and future.level == 0
            and [(a.name, a.asname) for a in future.names] == [("annotations", None)]
        ):
            raise fail(future, "the second statement must be 'from __future__ import annotations'")
        self.types.collect_definitions(body[2:])
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
        if self.kind == "tool" and sorted(functions) != sorted(self.functions.function_names):
            raise fail(
                None,
                f"expected exactly the function(s) {sorted(self.functions.function_names)}, got {functions}",
            )
        expected = ["__dir__", "__getattr__"] + (["_Package"] if self.kind == "package" else [])
        if self.kind in ("root", "package") and sorted(functions) != sorted(expected):
            raise fail(None, f"a package defines exactly {', '.join(expected)}")
        if len(set(functions)) != len(functions):
            raise fail(None, "a function is defined twice")

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Import):
            pairs = {(a.name, a.asname) for a in stmt.names}
            if len(stmt.names) != 1 or not pairs <= self.allowed_imports:
                raise fail(stmt, "unexpected import")
            return
        if isinstance(stmt, ast.ImportFrom):
            names = [(a.name, a.asname) for a in stmt.names]
            if not (
                self.kind == "resources"
                and stmt.module == "urllib.parse"
                and stmt.level == 0
                and names == [("quote", "_quote")]
            ):
                raise fail(stmt, "unexpected import")
            return
        if isinstance(stmt, ast.Assign):
            self.assign(stmt)
            return
        if isinstance(stmt, ast.AnnAssign):
            self.ann_assign(stmt)
            return
        if isinstance(stmt, ast.ClassDef):
            self.types.typeddict_class(stmt)
            return
        if isinstance(stmt, ast.If):
            self.type_checking_block(stmt)
            return
        raise fail(stmt, f"statement {type(stmt).__name__} is not allowed at module level")

    def assign(self, stmt: ast.Assign) -> None:
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            raise fail(stmt, "only simple assignments are allowed")
        target = stmt.targets[0].id
        if target in _PROVENANCE:
            allowed = _PROVENANCE if self.kind == "tool" else {"__server__"}
            if target not in allowed or not is_str(stmt.value):
                raise fail(stmt, f"{target} must be a string constant")
            return
        if self.kind == "tool" and isinstance(stmt.value, ast.Call):
            self.types.functional_typeddict(target, stmt.value)
            return
        raise fail(stmt, f"assignment to {target!r} is not allowed")

    def ann_assign(self, stmt: ast.AnnAssign) -> None:
        if not isinstance(stmt.target, ast.Name) or stmt.value is None:
            raise fail(stmt, "unexpected annotated assignment")
        target = stmt.target.id
        if target == "__all__" and self.kind in ("root", "package"):
            if ast.dump(stmt.annotation) != dump_expr("list[str]"):
                raise fail(stmt, "__all__ must be annotated list[str]")
            value = stmt.value
            if not isinstance(value, ast.List) or not all(is_str(e) for e in value.elts):
                raise fail(stmt, "__all__ must be a list of string constants")
            names = [e.value for e in value.elts if isinstance(e, ast.Constant)]
            if names != self.exports:
                raise fail(stmt, "__all__ does not list exactly the expected names")
            return
        if self.kind == "tool" and is_attr(stmt.annotation, "_t", ["TypeAlias"]):
            if not (isinstance(stmt.value, ast.Constant) and type(stmt.value.value) is str):
                raise fail(stmt, "a type alias must be a string")
            self.types.type_string(stmt.value)
            return
        raise fail(stmt, f"annotated assignment to {target!r} is not allowed")

    def type_checking_block(self, stmt: ast.If) -> None:
        if (
            self.kind not in ("root", "package")
            or not is_attr(stmt.test, "_t", ["TYPE_CHECKING"])
            or stmt.orelse
        ):
            raise fail(stmt, "only 'if _t.TYPE_CHECKING:' re-exports are allowed")
        seen: list[str] = []
        for node in stmt.body:
            if not isinstance(node, ast.ImportFrom) or node.level != 0 or len(node.names) != 1:
                raise fail(node, "TYPE_CHECKING may only re-export names")
            alias = node.names[0]
            if alias.name != alias.asname or alias.name not in self.exports:
                raise fail(node, "TYPE_CHECKING re-exports must be 'import x as x' of an exported name")
            expected_module = self.package if self.kind == "root" else f"{self.package}.{alias.name}"
            if node.module != expected_module:
                raise fail(node, f"re-export from unexpected module {node.module!r}")
            seen.append(alias.name)
        if seen != self.exports:
            raise fail(stmt, "TYPE_CHECKING must re-export exactly the names in __all__")

    # -- functions ----------------------------------------------------------------------------

    def function(self, node: ast.FunctionDef | ast.ClassDef) -> None:
        if self.kind in ("root", "package"):
            canonical = _canonical_functions(self.kind == "root").get(node.name)
            if canonical is None or ast.dump(node) != canonical:
                raise fail(node, f"package definition {node.name!r} differs from the canonical one")
            return
        assert isinstance(node, ast.FunctionDef)
        self.functions.function(node)
