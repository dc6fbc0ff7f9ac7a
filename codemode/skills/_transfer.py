"""Skills as files, to move them between deployments: ``codemode skill export`` / ``import``.

An export is one JSON document: the skill's name, description and source, the pins it had
where it came from, and a digest over all of them. Import recomputes the digest and refuses a
file whose content does not match it (edited by hand, cut short, mangled in transit). The
digest proves integrity, not origin: whoever edits the file can recompute it. That is why an
imported skill is checked again against this deployment's tools and is only *proposed*: a
person here approves it before any run can use it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from codemode.skills._check import SkillError
from codemode.skills._pin import source_digest

EXPORT_FORMAT = "codemode-skill-export-1"
_FIELDS = ("format", "name", "version", "description", "source", "source_digest", "pin", "deps")


@dataclass(frozen=True, slots=True)
class SkillExport:
    name: str
    version: int
    description: str
    source: str
    pin: str
    """The pin where it was exported (informational: pins are recomputed on import)."""
    deps: dict[str, str]


def _seal(body: Mapping[str, Any]) -> str:
    text = json.dumps({k: body[k] for k in _FIELDS}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def export_text(skill: SkillExport) -> str:
    body: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "name": skill.name,
        "version": skill.version,
        "description": skill.description,
        "source": skill.source,
        "source_digest": source_digest(skill.source),
        "pin": skill.pin,
        "deps": dict(sorted(skill.deps.items())),
    }
    body["digest"] = _seal(body)
    return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def read_export(text: str, where: str) -> SkillExport:
    """Parse and check an export; raise :class:`SkillError` saying what is wrong with ``where``."""
    try:
        loaded: object = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SkillError(f"{where} is not a skill export (not JSON: {exc.msg}, line {exc.lineno})") from None
    if not isinstance(loaded, dict) or cast("dict[str, Any]", loaded).get("format") != EXPORT_FORMAT:
        raise SkillError(f"{where} is not a skill export ('format' is not {EXPORT_FORMAT!r})")
    body = cast("dict[str, Any]", loaded)
    missing = [k for k in (*_FIELDS, "digest") if k not in body]
    if missing:
        raise SkillError(f"{where} lacks {', '.join(missing)}: export the skill again")
    if body["digest"] != _seal(body) or body["source_digest"] != source_digest(str(body["source"])):
        raise SkillError(
            f"{where} was changed after it was exported (its digest does not match its content): "
            "refused; export the skill again from its source deployment"
        )
    deps = cast("dict[str, Any]", body["deps"]) if isinstance(body["deps"], dict) else {}
    texts = (body["name"], body["description"], body["source"], body["pin"])
    if not all(isinstance(t, str) for t in texts) or not isinstance(body["version"], int):
        raise SkillError(f"{where}: name, description, source and pin must be text, version a number")
    return SkillExport(
        name=str(body["name"]),
        version=int(body["version"]),
        description=str(body["description"]),
        source=str(body["source"]),
        pin=str(body["pin"]),
        deps={str(k): str(v) for k, v in deps.items()},
    )
