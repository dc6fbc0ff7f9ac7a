"""Untrusted patterns in a schema, and the separate processes that check the ones RE2 cannot run.

Shared by the argument gate's tests, the output check's and serve's: a schema with ``pattern``
at each place a validator searches one (the object's field named ``field``), the schema workers
(:mod:`codemode._schema_worker`) running below a test, and a count of what they were given.
"""

from __future__ import annotations

from typing import Any

import psutil
import pytest

from codemode import _schema_isolation as schema_isolation

HOSTILE = "a" * 30 + "!"
"""Seconds (a minute, for some) of backtracking in Python's re for a catastrophic pattern."""


def in_string(pattern: str, field: str = "x") -> dict[str, Any]:
    return {"type": "object", "properties": {field: {"type": "string", "pattern": pattern}}}


def in_key(pattern: str, field: str = "x") -> dict[str, Any]:
    closed = {
        "type": "object",
        "patternProperties": {pattern: {"type": "integer"}},
        "additionalProperties": False,
    }
    return {"type": "object", "properties": {field: closed}}


def in_property_names(pattern: str, field: str = "x") -> dict[str, Any]:
    names = {"type": "object", "propertyNames": {"pattern": pattern}}
    return {"type": "object", "properties": {field: names}}


def schema_workers() -> list[psutil.Process]:
    """The separate processes checking a schema, anywhere below this test."""
    found: list[psutil.Process] = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "codemode._schema_worker" in child.cmdline():
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def count_separate_processes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The instances checked in a separate process (the real one) from now on, in order."""
    checked: list[Any] = []
    real = schema_isolation._in_separate_process  # pyright: ignore[reportPrivateUsage]

    async def counted(schema: dict[str, Any], instance: Any, limit_s: float) -> Any:
        checked.append(instance)
        return await real(schema, instance, limit_s)

    monkeypatch.setattr(schema_isolation, "_in_separate_process", counted)
    return checked
