"""codemode ships its annotations (PEP 561): the ``py.typed`` marker is in the package, and the
wheel's file rules take it along."""

from __future__ import annotations

import fnmatch
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_package_directory_holds_the_py_typed_marker() -> None:
    marker = resources.files("codemode") / "py.typed"
    assert marker.is_file(), "without codemode/py.typed, type checkers ignore codemode's annotations"


def test_the_wheel_takes_the_marker_along() -> None:
    wheel: dict[str, Any] = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["hatch"]["build"][
        "targets"
    ]["wheel"]
    assert "codemode" in wheel["packages"]
    excluded = [p for p in wheel.get("exclude", []) if fnmatch.fnmatch("codemode/py.typed", p)]
    assert excluded == [], f"the wheel's exclude rules drop codemode/py.typed: {excluded}"
