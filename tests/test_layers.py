"""The house's layers, held by a test: which part of ``codemode/`` may import which.

Every rule is data below (``LAYERS``, ``NEVER``, ``ONLY``, ``ALLOWED_CIRCLES``); the checker reads
imports with ``ast`` only (nothing is imported or run), so the test is fast and sees lazy imports
inside functions and ``TYPE_CHECKING`` blocks too. ``docs/architecture.md`` explains the layers
and where a new feature goes.

A *unit* is a subpackage of ``codemode`` (``broker``, ``ledger`` …) or a module at the package's
root (``_redaction``, ``calls`` …). A unit may import its own modules and units of a lower layer,
never a unit of its own layer or of a higher one.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Lowest first. A unit imports only units of lower layers (and itself).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_version", "_ecma_regex"),
    # Leaf helpers: small, dependency-free pieces every layer may use.
    (
        "calls",
        "_atomic",
        "_private_files",
        "_runtime_dir",
        "_tokens",
        "_redaction",
        "_lazy",
        "_resources",
        "_safe_regex",
        "_text",
        "_run_usage",
    ),
    # Foundations: settings, the catalog and its pins, the network guard, search, telemetry, and
    # the reading of untrusted JSON Schemas (whose patterns go through `_safe_regex`).
    ("config", "catalog", "net", "search", "_metrics", "_otel_export", "_tracing", "_json_schema"),
    # Services that know nothing of each other: the ledger, the stubs, the sandbox, sign-in, the
    # workspaces that outlive a run, and
    # the killable process that checks what RE2 cannot.
    ("ledger", "stubs", "sandbox", "auth", "workspace", "_schema_isolation", "_schema_worker"),
    # The two halves of a call's trip: the broker's gates and the MCP host; and saved skills,
    # checked against the stub tree and stored in the ledger.
    ("host", "broker", "skills"),
    # The engine wires the halves together for one run.
    ("engine",),
    # Features built on the engine.
    ("batch", "bench", "serve", "testing"),
    # Entry points: the command line, and the public `CodeMode` (the engine with its batch jobs).
    ("cli", "_api"),
    # The package's face: `codemode/__init__.py` declares the public API, loading each name lazily.
    ("codemode",),
)

# Unit -> units it must never import, even where the layers would allow it.
NEVER: Mapping[str, frozenset[str]] = {
    "broker": frozenset({"sandbox", "host", "stubs"}),
    "sandbox": frozenset({"broker", "host"}),
    "ledger": frozenset({"broker", "sandbox", "host"}),
    "engine": frozenset({"batch"}),
}

# Unit -> the only units it may import. Configuration imports no feature package and no
# network code: only the bottom two layers.
ONLY: Mapping[str, frozenset[str]] = {
    "config": frozenset(LAYERS[0] + LAYERS[1]),
}

# Import circles allowed inside one package, between its private modules, each by name.
ALLOWED_CIRCLES: frozenset[frozenset[str]] = frozenset(
    {
        # `dispatch` serves CodeMode's tools; CodeMode offers `dispatch` as a method.
        frozenset({"codemode.engine._engine", "codemode.engine._tools"}),
    }
)

# Modules whose tool calls must go through the broker: they may hold an McpHost (to list or
# sign in) but never call a tool on it.
BROKER_ONLY_CALLERS = ("codemode.cli",)

RUNTIME = "sandbox/runtime"
RUNTIME_OWN = frozenset({"codemode_runtime", "codemode_boot"})


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name (a module, or a package's __init__)
    path: Path
    line: int

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root).as_posix()}:{self.line}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(root: Path, module: str) -> bool:
    return (root / Path(*module.split(".")) / "__init__.py").exists()


def _exists(root: Path, module: str) -> bool:
    base = root / Path(*module.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def read_imports(root: Path, package: str = "codemode") -> list[Import]:
    """Every import of a ``package`` module by a ``package`` module under ``root``."""
    found: list[Import] = []
    for path in sorted((root / package).rglob("*.py")):
        importer = module_name(root, path)
        here = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _targets(root, node, here):
                if target == package or target.startswith(package + "."):
                    found.append(Import(importer, target, path, getattr(node, "lineno", 0)))
    return found


def _targets(root: Path, node: ast.AST, here: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            parts = here.split(".")
            base = ".".join(parts[: len(parts) - (node.level - 1)])
            module = f"{base}.{node.module}" if node.module else base
        else:
            module = node.module or ""
        names = [f"{module}.{alias.name}" for alias in node.names]
        submodules = [name for name in names if _exists(root, name)]
        # `from pkg import sub` imports the submodule; `from mod import name` imports mod.
        yield from submodules or [module]
        if submodules and len(submodules) < len(names):
            yield module


def unit_of(module: str) -> str:
    parts = module.split(".")
    return "codemode" if len(parts) == 1 else parts[1]


def layer_of(unit: str) -> int | None:
    for index, units in enumerate(LAYERS):
        if unit in units:
            return index
    return None


def _private_parent(module: str) -> str | None:
    """The package whose private module ``module`` is (``a.b._c.d`` -> ``a.b``), if any."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def layer_problems(imports: Iterable[Import], root: Path) -> list[str]:
    problems: list[str] = []
    units = {unit_of(i.importer) for i in imports} | {unit_of(i.imported) for i in imports}
    problems += [f"unit {u!r} is in no layer: add it to LAYERS" for u in sorted(units) if layer_of(u) is None]
    for item in imports:
        source, target = unit_of(item.importer), unit_of(item.imported)
        if source == target:
            continue
        low, high = layer_of(target), layer_of(source)
        if low is not None and high is not None and low >= high:
            direction = "its own layer" if low == high else "a higher layer"
            problems.append(f"{item.where(root)}: {source} imports {target}, a unit of {direction}")
        if target in NEVER.get(source, frozenset()):
            problems.append(f"{item.where(root)}: {source} must never import {target}")
        allowed = ONLY.get(source)
        if allowed is not None and target not in allowed:
            problems.append(f"{item.where(root)}: {source} may import only {sorted(allowed)}, not {target}")
    return problems


def private_problems(imports: Iterable[Import], root: Path) -> list[str]:
    """A module may import the private modules of its own unit and of the packages above it.

    A unit is one room: ``broker`` may use ``broker.gates._consent``; ``cli`` may not use
    ``broker._risk``, which ``broker`` exports from its ``__init__`` if others need it."""
    problems: list[str] = []
    for item in imports:
        owner = _private_parent(item.imported)
        if owner is None:
            continue
        importer_package = (
            item.importer if _is_package(root, item.importer) else item.importer.rpartition(".")[0]
        )
        above = importer_package == owner or importer_package.startswith(owner + ".")
        if not above and unit_of(owner) != unit_of(item.importer):
            problems.append(f"{item.where(root)}: {item.importer} imports the private module {item.imported}")
    return problems


def circles(imports: Iterable[Import]) -> list[frozenset[str]]:
    """Strongly connected sets of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for item in imports:
        if item.importer != item.imported:
            graph[item.importer].add(item.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.add(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(frozenset(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def circle_problems(imports: Iterable[Import], allowed: frozenset[frozenset[str]]) -> list[str]:
    problems: list[str] = []
    for circle in circles(imports):
        packages = {_private_parent(m) for m in circle}
        inside_one_package = len(packages) == 1 and None not in packages
        if inside_one_package and circle in allowed:
            continue
        problems.append(f"import circle: {' -> '.join(sorted(circle))}")
    return problems


def tool_call_problems(root: Path) -> list[str]:
    """A CLI module that holds an McpHost never calls a tool on anything but the engine."""
    problems: list[str] = []
    for prefix in BROKER_ONLY_CALLERS:
        for path in sorted((root / Path(*prefix.split("."))).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            holds_host = any(
                isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("codemode.host")
                and any(alias.name in ("McpHost", "ServerConnection") for alias in node.names)
                for node in ast.walk(tree)
            )
            calls = [
                node.lineno
                for node in ast.walk(tree)
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("call_tool", "send_call")
            ]
            if holds_host and calls:
                where = path.relative_to(root).as_posix()
                problems.append(
                    f"{where}:{calls[0]}: holds an McpHost and calls a tool: go through the engine"
                )
    return problems


def runtime_problems(root: Path) -> list[str]:
    """The in-sandbox runtime runs in the sandbox's bare interpreter: standard library only."""
    problems: list[str] = []
    for path in sorted((root / RUNTIME).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in RUNTIME_OWN:
                    problems.append(f"{path.relative_to(root).as_posix()}:{node.lineno}: imports {name}")
    return problems


def all_problems(root: Path) -> list[str]:
    imports = read_imports(root)
    return (
        layer_problems(imports, root)
        + private_problems(imports, root)
        + circle_problems(imports, ALLOWED_CIRCLES)
        + tool_call_problems(root)
        + (runtime_problems(root) if (root / RUNTIME).exists() else [])
    )


# -- the house as it is ------------------------------------------------------------------------


def test_the_house_keeps_its_layers() -> None:
    problems = all_problems(REPO)
    assert not problems, "\n".join(problems)


def test_every_allowed_circle_still_exists() -> None:
    # An allowance that no longer matches a circle is stale: remove it so it cannot hide a new one.
    present = set(circles(read_imports(REPO)))
    assert not [sorted(c) for c in ALLOWED_CIRCLES if c not in present]


# -- the checker itself, on small trees made here ----------------------------------------------


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for package in ("codemode", "codemode/ledger", "codemode/broker", "codemode/config", "codemode/cli"):
        init = root / package / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        if not init.exists():
            init.write_text("", encoding="utf-8")
    return root


def test_a_wrong_way_import_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"codemode/ledger/_store.py": "from codemode.broker import Broker\n"})
    problems = all_problems(root)
    assert any("ledger imports broker, a unit of a higher layer" in p for p in problems), problems
    assert any("ledger must never import broker" in p for p in problems), problems


def test_a_lazy_import_inside_a_function_counts(tmp_path: Path) -> None:
    text = "def f():\n    from codemode.cli import main\n    return main\n"
    root = _tree(tmp_path, {"codemode/broker/_x.py": text})
    assert any("broker imports cli" in p for p in all_problems(root))


def test_an_import_within_one_layer_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"codemode/host/__init__.py": "from codemode.broker import gates\n"})
    assert any("host imports broker, a unit of its own layer" in p for p in all_problems(root))


def test_configuration_may_not_import_feature_or_network_code(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"codemode/config/_load.py": "import codemode.net\n"})
    assert any("config may import only" in p for p in all_problems(root))


def test_a_private_module_of_another_package_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "codemode/broker/_risk.py": "RISK = 1\n",
            "codemode/cli/_run.py": (
                "from codemode.broker._risk import RISK\nfrom codemode._atomic import x\n"
            ),
            "codemode/_atomic.py": "x = 1\n",
        },
    )
    problems = private_problems(read_imports(root), root)
    assert problems == [
        "codemode/cli/_run.py:1: codemode.cli._run imports the private module codemode.broker._risk"
    ]


def test_a_circle_is_found_and_allowed_only_by_name_inside_one_package(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "codemode/ledger/_a.py": "from codemode.ledger._b import B\nA = 1\n",
            "codemode/ledger/_b.py": "from codemode.ledger._a import A\nB = 1\n",
        },
    )
    imports = read_imports(root)
    circle = frozenset({"codemode.ledger._a", "codemode.ledger._b"})
    assert circles(imports) == [circle]
    assert circle_problems(imports, frozenset()) == [
        "import circle: codemode.ledger._a -> codemode.ledger._b"
    ]
    assert circle_problems(imports, frozenset({circle})) == []


def test_a_circle_across_packages_is_never_allowed(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "codemode/ledger/_a.py": "from codemode.broker._b import B\n",
            "codemode/broker/_b.py": "from codemode.ledger._a import A\n",
        },
    )
    imports = read_imports(root)
    assert circle_problems(imports, frozenset(circles(imports)))


def test_a_cli_command_that_calls_a_tool_on_the_host_is_found(tmp_path: Path) -> None:
    text = (
        "from codemode.host import McpHost\n\n"
        "async def f(host: McpHost):\n    await host.call_tool('a', 'b', {})\n"
    )
    root = _tree(tmp_path, {"codemode/cli/_x.py": text})
    assert tool_call_problems(root) == [
        "codemode/cli/_x.py:4: holds an McpHost and calls a tool: go through the engine"
    ]


def test_the_runtime_may_import_only_the_standard_library(tmp_path: Path) -> None:
    root = _tree(tmp_path, {f"{RUNTIME}/codemode_runtime/_x.py": "import json\nimport pydantic\n"})
    assert runtime_problems(root) == [f"{RUNTIME}/codemode_runtime/_x.py:2: imports pydantic"]
