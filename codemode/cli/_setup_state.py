"""What stands between the configured servers and the tools a program may use, and what to run next.

``codemode search`` and ``codemode tree`` read only approved tools from codemode.lock. When they
find none (or fewer than the configuration promises), an empty answer would leave a newcomer
guessing; these say which step is missing: no server is configured, a server was never synced,
or its tools wait for review.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from codemode.catalog import LockFile
    from codemode.config import Config

__all__ = [
    "ServerReadiness",
    "SetupGap",
    "command",
    "config_flags",
    "readiness",
    "setup_gap",
    "waiting_for_review",
    "waiting_note",
]

GapState = Literal["no-servers", "not-synced", "not-approved"]


@dataclass(frozen=True, slots=True)
class ServerReadiness:
    """One enabled server's standing in codemode.lock."""

    server: str
    synced: bool
    """Listed at a sync: the lock holds its tools."""
    approved: int
    """Tools a program may import (approved, still listed)."""
    pending: int
    """Tools that are new or changed since their approval: not usable until approved."""


@dataclass(frozen=True, slots=True)
class SetupGap:
    """Why no tool at all is usable, and the command that is the next step."""

    state: GapState
    message: str
    hint: str

    def to_json(self) -> dict[str, str]:
        return {"state": self.state, "error": self.message, "hint": self.hint}


def config_flags(config: Config) -> str:
    """``--config PATH`` when ``config`` is not the file a command finds by default, else ``""``."""
    from codemode.config import default_config_path

    if Path(config.source).resolve() == default_config_path().resolve():
        return ""
    return f"--config {shlex.quote(config.source)}"


def command(config: Config, text: str) -> str:
    """``codemode <text>`` for ``config``, ready to paste (see :func:`config_flags`)."""
    flags = config_flags(config)
    return f"codemode {text} {flags}" if flags else f"codemode {text}"


def readiness(config: Config, lock: LockFile) -> list[ServerReadiness]:
    """Each enabled server's standing, in name order."""
    out: list[ServerReadiness] = []
    for server in sorted(config.enabled_servers()):
        entries = lock.servers.get(server)
        if entries is None:
            out.append(ServerReadiness(server, synced=False, approved=0, pending=0))
            continue
        live = [entry for entry in entries.values() if not entry.removed]
        approved = sum(entry.approved is not None for entry in live)
        # New, or changed since approved (the approved definition stays, but calls are refused).
        pending = sum(entry.observed is not None for entry in live)
        out.append(ServerReadiness(server, synced=True, approved=approved, pending=pending))
    return out


def _tools(count: int) -> str:
    return f"{count} tool{'s' if count != 1 else ''}"


def waiting_for_review(count: int) -> str:
    return f"{_tools(count)} {'waits' if count == 1 else 'wait'} for review"


def _review_hint(config: Config) -> str:
    return (
        f"review them with '{command(config, 'pin')}', then approve them with "
        f"'{command(config, 'pin --approve')}' (or 'pin --approve SERVER' for one server)"
    )


def setup_gap(config: Config, lock: LockFile) -> SetupGap | None:
    """Why no tool is usable, when none is; None when some tool is approved."""
    servers = readiness(config, lock)
    if not servers:
        return _no_servers(config)
    if any(s.approved for s in servers):
        return None
    synced = [s for s in servers if s.synced]
    unsynced = ", ".join(s.server for s in servers if not s.synced)
    if not synced:
        message = f"nothing is synced yet: {config.lock_path.name} has no tools of {unsynced}"
        hint = (
            f"run '{command(config, 'sync')}' to connect to the servers and list their tools, then "
            f"'{command(config, 'pin')}' to review them and '{command(config, 'pin --approve')}' "
            "to approve them"
        )
        return SetupGap("not-synced", message, hint)
    pending = sum(s.pending for s in synced)
    if pending:
        per_server = ", ".join(f"{s.server} ({_tools(s.pending)})" for s in synced if s.pending)
        message = f"no tool is approved yet: {waiting_for_review(pending)}: {per_server}"
        hint = _review_hint(config)
    else:
        listed_none = ", ".join(s.server for s in synced)
        message = f"no tool is approved yet, and none waits for review: {listed_none} listed no tools"
        hint = f"'{command(config, 'servers')}' shows each server's status"
    if unsynced:
        message += f" (never synced: {unsynced})"
        hint += f"; run '{command(config, 'sync')}' for the others"
    return SetupGap("not-approved", message, hint)


def _no_servers(config: Config) -> SetupGap:
    from codemode.config import no_servers_hint

    disabled = sorted(config.servers)
    if disabled:
        message = f"every server in {config.source} is disabled ({', '.join(disabled)})"
        hint = f"set enabled = true in a server's table, then run '{command(config, 'sync')}'"
    else:
        message = f"no servers are configured in {config.source}"
        hint = no_servers_hint(config.source, command_flags=config_flags(config))
    return SetupGap("no-servers", message, hint)


def waiting_note(config: Config, lock: LockFile) -> tuple[str, str] | None:
    """When some tools are usable but a server's are not (never synced, or waiting for review):
    ``(note, hint)`` naming those servers; None when every enabled server has approved tools."""
    servers = readiness(config, lock)
    unsynced = [s.server for s in servers if not s.synced]
    waiting = [f"{s.server} ({_tools(s.pending)})" for s in servers if s.synced and s.pending]
    if not unsynced and not waiting:
        return None
    parts: list[str] = []
    hints: list[str] = []
    if unsynced:
        parts.append(f"never synced: {', '.join(unsynced)}")
        hints.append(f"run '{command(config, 'sync')}'")
    if waiting:
        parts.append(f"waiting for review: {', '.join(waiting)}")
        hints.append(_review_hint(config))
    return "not every tool is usable yet; " + "; ".join(parts), "; ".join(hints)
