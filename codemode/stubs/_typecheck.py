"""Check an exported tree the way a user's editor and the sandbox will see it.

:func:`check_export` exports a tree, runs pyright in strict mode over it (with a
``pyrightconfig.json`` written next to ``servers/``) and imports every module in a fresh
interpreter against a stand-in ``codemode_runtime``. Used by the tests and handy for trying
the stubs of any real server::

    tree = render_tree(catalogs)
    report = check_export(tree, Path("/tmp/tree"))
    assert report.ok, report.summary()
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from codemode.errors import CodemodeError

if TYPE_CHECKING:
    from codemode.stubs._tree import VirtualTree

__all__ = ["ExportCheck", "PyrightReport", "check_export", "import_export", "typecheck_export"]

PYRIGHT_CONFIG: Final[dict[str, Any]] = {
    "include": ["servers"],
    "typeCheckingMode": "strict",
    "pythonVersion": "3.11",
    # The runtime module exists only inside the sandbox; its .pyi is all there is here.
    "reportMissingModuleSource": "none",
}


@dataclass(frozen=True, slots=True)
class PyrightReport:
    errors: int
    warnings: int
    files: int
    diagnostics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ExportCheck:
    directory: Path
    pyright: PyrightReport
    modules_imported: int
    import_errors: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.pyright.errors == 0 and self.pyright.warnings == 0 and not self.import_errors

    def summary(self) -> str:
        lines = [
            f"{self.directory}: pyright {self.pyright.errors} error(s), {self.pyright.warnings} warning(s)"
            f" in {self.pyright.files} file(s); {self.modules_imported} module(s) imported,"
            f" {len(self.import_errors)} import error(s)"
        ]
        lines += [f"  {d}" for d in self.pyright.diagnostics[:50]]
        lines += [f"  import: {e}" for e in self.import_errors[:50]]
        return "\n".join(lines)


def _find_pyright(pyright: str | Path | None) -> str:
    if pyright is not None:
        return str(pyright)
    beside = Path(sys.executable).with_name("pyright")
    if beside.exists():
        return str(beside)
    found = shutil.which("pyright")
    if found is None:
        raise CodemodeError("pyright is not installed (pip install pyright) or pass pyright=PATH")
    return found


def typecheck_export(
    directory: Path, *, pyright: str | Path | None = None, timeout: float = 600
) -> PyrightReport:
    """Run strict pyright over an exported tree (writes ``pyrightconfig.json`` into ``directory``)."""
    directory = Path(directory)
    config = directory / "pyrightconfig.json"
    config.write_text(json.dumps(PYRIGHT_CONFIG, indent=2) + "\n", encoding="utf-8")
    executable = _find_pyright(pyright)
    try:
        completed = subprocess.run(
            [executable, "--outputjson", "-p", str(config)],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except OSError as exc:
        raise CodemodeError(f"cannot run pyright at {executable!r}: {exc.strerror or exc}") from exc
    try:
        report = json.loads(completed.stdout)
    except json.JSONDecodeError as exc:
        raise CodemodeError(
            f"pyright produced no JSON report (exit {completed.returncode}):"
            f" {completed.stderr.strip()[:2000]}"
        ) from exc
    diagnostics = tuple(
        f"{_relative(d.get('file'), directory)}:{d.get('range', {}).get('start', {}).get('line', 0) + 1}:"
        f" {d.get('severity')}: {d.get('message')}"
        for d in report.get("generalDiagnostics", [])
        if d.get("severity") in ("error", "warning")
    )
    summary = report.get("summary", {})
    return PyrightReport(
        errors=int(summary.get("errorCount", 0)),
        warnings=int(summary.get("warningCount", 0)),
        files=int(summary.get("filesAnalyzed", 0)),
        diagnostics=diagnostics,
    )


def _relative(file: object, directory: Path) -> str:
    if not isinstance(file, str):
        return "?"
    try:
        return str(Path(file).relative_to(directory.resolve()))
    except ValueError:
        return file


# Runs in a fresh interpreter: a stand-in runtime, then every module and every lazy name.
_IMPORT_SCRIPT: Final = r"""
import importlib, json, sys, types
from pathlib import Path

root = Path(sys.argv[1])
sys.path.insert(0, str(root))
runtime = types.ModuleType("codemode_runtime")
def _unavailable(*args, **kwargs):
    raise RuntimeError("codemode_runtime stand-in: no broker outside the sandbox")
for name in ("call_tool", "read_resource", "get_prompt", "result", "parallel"):
    setattr(runtime, name, _unavailable)
for name in ("CallError", "ToolError", "CallDenied", "CallFailed"):
    setattr(runtime, name, type(name, (Exception,), {}))
for name in ("Image", "Audio", "EmbeddedResource", "ResourceLink", "ResourceContents", "PromptMessage"):
    setattr(runtime, name, type(name, (), {}))
sys.modules["codemode_runtime"] = runtime

errors, count = [], 0
for path in sorted((root / "servers").rglob("*.py")):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    module = ".".join(parts)
    try:
        loaded = importlib.import_module(module)
        count += 1
        for name in getattr(loaded, "__all__", []):
            value = getattr(loaded, name)
            if not (callable(value) or isinstance(value, types.ModuleType)):
                errors.append(f"{module}.{name}: lazy name resolved to {type(value).__name__}")
    except Exception as exc:
        errors.append(f"{module}: {type(exc).__name__}: {exc}")
print(json.dumps({"count": count, "errors": errors}))
"""


def import_export(directory: Path, *, timeout: float = 300) -> tuple[int, tuple[str, ...]]:
    """Import every module of an exported tree in a fresh interpreter; ``(modules, errors)``."""
    completed = subprocess.run(
        [sys.executable, "-I", "-c", _IMPORT_SCRIPT, str(Path(directory).resolve())],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    try:
        result = json.loads(completed.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise CodemodeError(
            f"import check crashed (exit {completed.returncode}): {completed.stderr[-2000:]}"
        ) from exc
    return int(result["count"]), tuple(str(e) for e in result["errors"])


def check_export(tree: VirtualTree, directory: Path, *, pyright: str | Path | None = None) -> ExportCheck:
    """Export ``tree`` to ``directory``, type-check it strictly and import every module."""
    directory = Path(directory)
    tree.export(directory)
    report = typecheck_export(directory, pyright=pyright)
    count, errors = import_export(directory)
    return ExportCheck(directory=directory, pyright=report, modules_imported=count, import_errors=errors)
