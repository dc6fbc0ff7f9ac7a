"""The notes fixture server deployed for the compensation tests, with ``[compensation]`` rules."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from codemode.catalog import save_lock
from codemode.config import config_from_mapping
from codemode.host import McpHost
from codemode.testing import approved_pins
from tests._fixture_server import FixtureServer

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "notes_server.py"
UNDO_ADD: dict[str, Any] = {
    "notes/add_note": {"tool": "notes/delete_note", "arguments": {"note_id": "result.note_id"}}
}
ADD_THREE_THEN_FAIL = (
    "from servers.notes import add_note\n"
    "for text in ('one', 'two', 'three'):\n"
    "    add_note(text=text)\n"
    "raise RuntimeError('the task failed after three writes')\n"
)


@dataclass
class Notes(FixtureServer):
    raw: dict[str, Any] = field(default_factory=lambda: {})
    """The configuration as a mapping (to write it as a file for the CLI)."""

    def held(self) -> dict[str, str]:
        """The notes the server holds now (its own state, not what codemode recorded)."""
        return json.loads(self.log.read_text(encoding="utf-8")) if self.log.exists() else {}

    def deletes(self) -> list[str]:
        """The note ids of every ``delete_note`` the server received, in order."""
        path = self.log.with_name(self.log.name + ".deleting")
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return [json.loads(line)["deleting"] for line in lines]


def notes_mapping(
    tmp_path: Path,
    *,
    compensation: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    policy: dict[str, Any] | None = None,
    trusted: bool = True,
) -> dict[str, Any]:
    """A ``codemode.toml`` as a mapping: the notes server (trusted unless said), its writes
    needing no consent (consent is not under test), ``[compensation]`` undoing ``add_note``."""
    return {
        "servers": {
            "notes": {
                "command": sys.executable,
                "args": [str(SERVER)],
                "env": {"NOTES_STATE": str(tmp_path / "notes.json"), **(env or {})},
                "protocol": "legacy",
                "trusted": trusted,
            }
        },
        "sandbox": {"backend": "process", "pool_size": 0},
        "policy": {"consent": {"never": ["notes/*"]}, **(policy or {})},
        "compensation": UNDO_ADD if compensation is None else compensation,
    }


async def deploy_notes(tmp_path: Path, **options: Any) -> Notes:
    """The notes server, every tool pinned and approved as it lists itself."""
    raw = notes_mapping(tmp_path, **options)
    config = config_from_mapping(raw, base_dir=tmp_path)
    async with McpHost(config) as host:
        save_lock(config.lock_path, approved_pins(host.catalogs()).lock)
    return Notes(config, tmp_path / "notes.json", raw)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        items = cast(dict[str, Any], value).items()
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in items) + " }"
    return "[" + ", ".join(_toml(v) for v in cast(list[Any], value)) + "]"


def write_toml(notes: Notes, path: Path) -> Path:
    """The deployment's configuration as a ``codemode.toml`` beside its lock and ledger."""
    lines = [f"{json.dumps(key)} = {_toml(value)}" for key, value in notes.raw.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
