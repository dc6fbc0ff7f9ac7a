"""What a skill may be, checked with ``ast`` before it is stored (nothing is imported or run).

A skill is one module: typed, documented top-level functions that call tool stubs and other
skills. Its dependencies must be visible in its text, because its pin is made of them: every
import names a tool module (``from servers.crm import get_customer``), a skill (``from
skills.renewals import at_risk``), the sandbox's ``codemode`` runtime, or the standard library.
Anything else is refused with the line, so a person fixes the file, not a guess.
"""

from __future__ import annotations

import ast
import keyword
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from codemode.errors import CodemodeError
from codemode.stubs import SKILL_LABEL, function_signature

MAX_SOURCE_BYTES = 256 * 1024
MAX_NAME_CHARS = 64
RUNTIME_MODULES = frozenset({"codemode", "codemode_runtime"})
# Standard-library ways to import by a name computed at run time: a skill's dependencies must be
# in its text, or its pin would not cover what it runs.
_DYNAMIC_IMPORTS = frozenset({"importlib", "runpy", "pkgutil", "zipimport"})
_DYNAMIC_CALLS = frozenset({"__import__", "exec", "eval", "compile"})
# The runtime's own calls name a tool by strings: a skill calls tools through their stubs, so its
# pin covers every tool it can reach.
_RAW_CALLS = frozenset({"call_tool", "read_resource", "get_prompt"})
_TOP_LEVEL = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
)


class SkillError(CodemodeError):
    """A skill that cannot be saved, or used: the message says where and what to change."""


@dataclass(frozen=True, slots=True)
class Known:
    """What a skill may import and which names it may not take, for one tenant and tree."""

    tools: Mapping[str, str]
    """Tool module (``servers.crm.get_customer``) -> the pin of its approved definition."""
    skills: Mapping[str, str]
    """Usable skill name -> its pin."""
    taken: frozenset[str] = field(default_factory=frozenset[str])
    """Names of servers and tools (as configured and as identifiers): no skill may shadow them."""


@dataclass(frozen=True, slots=True)
class SkillFunction:
    name: str
    signature: str
    """``def at_risk(limit: int = 5) -> list[dict[str, object]]``."""
    doc: str


@dataclass(frozen=True, slots=True)
class SkillShape:
    """What the check found: the importable functions and the pinned dependencies."""

    functions: tuple[SkillFunction, ...]
    deps: dict[str, str]
    """``servers.<server>.<tool>`` and ``skills.<name>`` -> the pin each has now."""


def check_name(name: str, known: Known) -> None:
    """Refuse a skill name that is not a plain identifier or that shadows a server or a tool."""
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise SkillError(
            f"skill name {name!r} is not usable: use a Python identifier that does not start with '_' "
            "(it is imported as skills.<name>)"
        )
    if len(name) > MAX_NAME_CHARS or not name.isascii():
        raise SkillError(f"skill name {name!r}: use at most {MAX_NAME_CHARS} ASCII characters")
    if name in known.taken:
        raise SkillError(f"skill name {name!r} shadows a server or a tool of this deployment: choose another")


def _where(name: str, node: ast.AST) -> str:
    return f"skill {name!r}, line {getattr(node, 'lineno', '?')}"


def _imports(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The dotted modules one import statement brings in (``from a.b import c`` -> ``a.b.c``
    for the stub and skill packages, whose members are modules; ``a.b`` otherwise)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    module = node.module or ""
    top = module.split(".")[0]
    if top in ("servers", "skills") and module.count(".") < (2 if top == "servers" else 1):
        yield from (f"{module}.{alias.name}" for alias in node.names)
    else:
        yield module


def _dependency(
    name: str, node: ast.Import | ast.ImportFrom, module: str, known: Known
) -> tuple[str, str] | None:
    """``(module, pin)`` for a tool or skill import; None for the runtime and standard library."""
    parts = module.split(".")
    top = parts[0]
    if top == "servers":
        if len(parts) != 3 or "*" in parts:
            raise SkillError(
                f"{_where(name, node)}: import a tool by its module, e.g. 'from servers.crm import "
                f"get_customer', not {module!r}: the skill's pin lists every tool it calls"
            )
        pin = known.tools.get(module)
        if pin is None:
            raise SkillError(
                f"{_where(name, node)}: {module} is not an approved tool here (see 'codemode tree')"
            )
        return module, pin
    if top == "skills":
        if len(parts) != 2 or "*" in parts:
            raise SkillError(
                f"{_where(name, node)}: import a skill as 'from skills.<name> import <function>'"
            )
        if parts[1] == name:
            raise SkillError(f"{_where(name, node)}: a skill cannot import itself")
        pin = known.skills.get(parts[1])
        if pin is None:
            raise SkillError(
                f"{_where(name, node)}: skill {parts[1]!r} is not an approved, current skill of this "
                "tenant (see 'codemode skill list')"
            )
        return module, pin
    if top in RUNTIME_MODULES:
        return None
    if top in _DYNAMIC_IMPORTS or top not in sys.stdlib_module_names:
        raise SkillError(
            f"{_where(name, node)}: imports {module!r}; a skill imports only tool stubs (servers.*), "
            "other skills (skills.*), codemode and the standard library, each by its name"
        )
    return None


def _function(name: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> SkillFunction:
    args = node.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    params += [a for a in (args.vararg, args.kwarg) if a is not None]
    untyped = [p.arg for p in params if p.annotation is None]
    if untyped:
        raise SkillError(f"{_where(name, node)}: {node.name}() needs a type for {', '.join(untyped)}")
    if node.returns is None:
        raise SkillError(f"{_where(name, node)}: {node.name}() needs a return type (-> ...)")
    doc = ast.get_docstring(node)
    if not doc:
        raise SkillError(f"{_where(name, node)}: {node.name}() needs a docstring saying what it does")
    return SkillFunction(node.name, function_signature(node), doc)


def _raw_call(node: ast.AST) -> str | None:
    """``codemode.call_tool`` (or ``from codemode import call_tool``): the runtime's raw calls."""
    if isinstance(node, ast.Attribute) and node.attr in _RAW_CALLS:
        return node.attr
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in RUNTIME_MODULES:
        found = [alias.name for alias in node.names if alias.name in _RAW_CALLS or alias.name == "*"]
        return found[0] if found else None
    return None


def check_skill(name: str, source: str, known: Known) -> SkillShape:
    """Check ``source`` as skill ``name``; raise :class:`SkillError` with the line, or return
    its functions and its dependencies' current pins."""
    check_name(name, known)
    if len(source.encode()) > MAX_SOURCE_BYTES:
        raise SkillError(f"skill {name!r} is over {MAX_SOURCE_BYTES // 1024} KiB: split it into skills")
    if SKILL_LABEL in source:
        line = source[: source.index(SKILL_LABEL)].count("\n") + 1
        raise SkillError(
            f"skill {name!r}, line {line}: {SKILL_LABEL} is codemode's own name (it labels calls)"
        )
    try:
        tree = ast.parse(source, filename=f"skills/{name}.py")
    except SyntaxError as exc:
        raise SkillError(f"skill {name!r}, line {exc.lineno}: does not parse: {exc.msg}") from None
    deps: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise SkillError(f"{_where(name, node)}: relative imports are not allowed in a skill")
            for module in _imports(node):
                found = _dependency(name, node, module, known)
                if found is not None:
                    deps[found[0]] = found[1]
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC_CALLS
        ):
            raise SkillError(f"{_where(name, node)}: {node.func.id}() is not allowed in a skill")
        raw = _raw_call(node)
        if raw is not None:
            raise SkillError(
                f"{_where(name, node)}: {raw} names a tool by strings; call the tool through its "
                "stub (from servers.<server> import <tool>) so the skill's pin covers it"
            )
    functions: list[SkillFunction] = []
    for index, node in enumerate(tree.body):
        is_doc = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if not is_doc and not isinstance(node, _TOP_LEVEL):
            raise SkillError(
                f"{_where(name, node)}: only imports, definitions and constants may be at the top "
                "level of a skill (code there would run at import): move it into a function"
            )
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
            functions.append(_function(name, node))
    if not functions:
        raise SkillError(
            f"skill {name!r} defines nothing importable: add a top-level function (not starting "
            "with '_') with types and a docstring"
        )
    return SkillShape(tuple(functions), dict(sorted(deps.items())))
