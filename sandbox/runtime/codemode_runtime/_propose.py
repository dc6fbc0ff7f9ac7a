"""``propose_skill``: a program offers its code as a saved skill. Only an offer: the host checks it
and records it as proposed, and a person approves it (``codemode skill approve``) before any run
can import it. Nothing in the runtime approves anything."""

from __future__ import annotations

from typing import Any, cast

from . import _wire as wire
from ._calls import remote


def propose_skill(name: str, source: str, description: str = "") -> dict[str, Any]:
    """Propose ``source`` as skill ``name`` (``skills/<name>.py``; imported as ``from
    skills.<name> import <function>`` once approved). Returns ``{"name", "version", "status",
    "note"}``; raises ``ToolError`` saying what to fix (with the line) when the host refuses it."""
    for value, what in ((name, "name"), (source, "source"), (description, "description")):
        if not isinstance(value, str):  # pyright: ignore[reportUnnecessaryIsInstance] - programs pass anything
            raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    params: wire.ProposeSkillParams = {"name": name, "source": source, "description": description}
    structured = remote(wire.PROPOSE_SKILL, params).get("structured")
    return cast(dict[str, Any], structured) if isinstance(structured, dict) else {}
