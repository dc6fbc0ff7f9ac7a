"""A skill's pin, and whether it still holds.

The pin is the digest of the skill's source and of the pin of every tool and skill it imports,
as they were when it was approved. When one of those changes (a tool's definition is re-approved,
an imported skill gets a new version, or is revoked), the skill is *stale*: it is kept, shown
with the reason, and not offered to runs until a person approves it again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Protocol

PIN_FORMAT = "codemode-skill-pin-1"


class PinnedSkill(Protocol):
    """What staleness needs of a stored skill version (``codemode.ledger.SkillVersion`` is one)."""

    @property
    def pin(self) -> str: ...

    @property
    def deps(self) -> dict[str, str]: ...


def source_digest(source: str) -> str:
    return "sha256:" + hashlib.sha256(source.encode()).hexdigest()


def skill_pin(digest: str, deps: Mapping[str, str]) -> str:
    """``sha256:<hex>`` of the source's digest and every dependency's pin (canonical JSON)."""
    body = {"format": PIN_FORMAT, "source": digest, "deps": dict(sorted(deps.items()))}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def stale_reasons(active: Mapping[str, PinnedSkill], tool_pins: Mapping[str, str]) -> dict[str, list[str]]:
    """For each skill of ``active`` (name -> its approved version), why it is stale (empty: it
    is current). ``tool_pins``: tool module -> the pin approved now."""
    found: dict[str, list[str]] = {}

    def reasons(name: str, visiting: frozenset[str]) -> list[str]:
        if name in found:
            return found[name]
        why: list[str] = []
        for module, pinned in active[name].deps.items():
            kind, _, rest = module.partition(".")
            if kind == "servers":
                now = tool_pins.get(module)
                if now is None:
                    why.append(f"{module} is no longer an approved tool")
                elif now != pinned:
                    why.append(f"{module} changed (approved for this skill: {pinned[:19]}, now {now[:19]})")
            elif rest not in active:
                why.append(f"{module} is no longer an approved skill")
            elif rest in visiting:
                why.append(f"{module} imports this skill back")
            elif active[rest].pin != pinned:
                why.append(f"{module} has a new version")
            elif reasons(rest, visiting | {rest}):
                why.append(f"{module} is stale")
        found[name] = why
        return why

    for name in active:
        reasons(name, frozenset({name}))
    return found
