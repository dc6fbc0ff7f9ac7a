"""``codemode.lock``: the approved definition of every tool, and what was last observed.

A tool is usable only while the server lists it with exactly the approved definition (same
canonical hash). Anything else fails closed:

- ``new``: listed but never approved;
- ``changed``: listed with a definition other than the approved one (description, schema or
  annotations drifted: a rug-pull looks exactly like this);
- ``removed``: approved but no longer listed.

The lock keeps the full approved definition, not only its hash, so arguments can be validated
against the *pinned* input schema and a reviewer can diff old against new. On load every
approved definition is re-hashed; a lock whose definitions do not match their hashes is
refused as corrupt rather than trusted.

The file is JSON (stable key order, one tool per block) so diffs in code review stay readable.
Writes are atomic (temp file + rename) and serialised with an advisory lock, because a running
``codemode serve`` records drift while a user may be running ``codemode pin``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from codemode._atomic import replace_file
from codemode.catalog._hashing import definition_hash
from codemode.catalog._model import ServerCatalog, ToolSpec, ToolStatus
from codemode.errors import CatalogError

LOCK_VERSION = 1


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def tool_definition(spec: ToolSpec) -> dict[str, Any]:
    """The hashed part of a tool, in MCP wire names."""
    return {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "inputSchema": spec.input_schema,
        "outputSchema": spec.output_schema,
        "annotations": spec.annotations,
    }


class PinnedDefinition(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    hash: str
    definition: dict[str, Any]
    at: str = Field(default_factory=_now)
    """When it was approved (for ``approved``) or first seen (for ``observed``)."""


class LockEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    approved: PinnedDefinition | None = None
    observed: PinnedDefinition | None = None
    """The live definition from the last sync, when it differs from ``approved``."""
    removed: bool = False
    """Not listed at the last successful sync."""


class LockFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = LOCK_VERSION
    servers: dict[str, dict[str, LockEntry]] = Field(default_factory=lambda: {})

    def entry(self, server: str, tool: str) -> LockEntry | None:
        return self.servers.get(server, {}).get(tool)

    def approved_definition(self, server: str, tool: str) -> dict[str, Any] | None:
        entry = self.entry(server, tool)
        return entry.approved.definition if entry and entry.approved else None


def status_of(lock: LockFile, spec: ToolSpec) -> ToolStatus:
    """The standing of a *listed* tool against the lock."""
    entry = lock.entry(spec.server, spec.name)
    if entry is None or entry.approved is None:
        return ToolStatus.NEW
    if entry.approved.hash != spec.schema_hash:
        return ToolStatus.CHANGED
    return ToolStatus.APPROVED


# -- reading and writing ---------------------------------------------------------------------


def _verify(lock: LockFile, source: str) -> None:
    for server, tools in lock.servers.items():
        for name, entry in tools.items():
            for label, pinned in (("approved", entry.approved), ("observed", entry.observed)):
                if pinned is None:
                    continue
                if pinned.definition.get("name") != name:
                    raise CatalogError(f"{source}: {server}/{name}: {label} definition names another tool")
                if definition_hash(pinned.definition) != pinned.hash:
                    raise CatalogError(
                        f"{source}: {server}/{name}: the {label} definition does not match its hash; "
                        "the lock file was edited or corrupted. Restore it from version control, or "
                        "delete it, run 'codemode sync' and approve the tools again."
                    )


def load_lock(path: Path) -> LockFile:
    """Read ``path``; a missing file is an empty lock. A corrupt one is an error, never ignored."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return LockFile()
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the lock file: {exc.strerror}") from exc
    try:
        lock = LockFile.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CatalogError(f"{path}: not a valid codemode lock file ({where}: {first['msg']})") from exc
    if lock.version != LOCK_VERSION:
        raise CatalogError(
            f"{path}: lock file version {lock.version} is not supported (expected {LOCK_VERSION})"
        )
    _verify(lock, str(path))
    return lock


def save_lock(path: Path, lock: LockFile) -> None:
    """Write atomically: readers see the old file or the new one, never half of one."""
    text = json.dumps(
        lock.model_dump(mode="json", exclude_none=True), indent=2, sort_keys=True, ensure_ascii=False
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, lambda handle: handle.write(text + "\n"), mode=0o600)


@contextlib.contextmanager
def locked(path: Path) -> Generator[None]:
    """Serialise read-modify-write cycles on ``path`` across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    guard = path.with_name(path.name + ".guard")
    with open(guard, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# -- sync: record what servers list ------------------------------------------------------------


@dataclass
class ServerDiff:
    server: str
    added: list[str] = field(default_factory=lambda: [])
    changed: list[str] = field(default_factory=lambda: [])
    removed: list[str] = field(default_factory=lambda: [])
    unchanged: list[str] = field(default_factory=lambda: [])
    pending: list[str] = field(default_factory=lambda: [])
    """Listed but not usable until approved (new or changed), including from earlier syncs."""

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "unchanged": len(self.unchanged),
            "pending_approval": self.pending,
        }


def observe(lock: LockFile, catalog: ServerCatalog) -> tuple[LockFile, ServerDiff]:
    """Record one server's live tool list in the lock; return the new lock and what changed.

    Only call this for a server that listed successfully: a server that failed to answer must
    not make its tools look removed.
    """
    before = lock.servers.get(catalog.server, {})
    after: dict[str, LockEntry] = {}
    diff = ServerDiff(server=catalog.server)
    listed = {spec.name: spec for spec in catalog.tools}
    for name, spec in sorted(listed.items()):
        entry = before.get(name)
        approved = entry.approved if entry else None
        if approved is not None and approved.hash == spec.schema_hash:
            after[name] = LockEntry(approved=approved)
            (diff.unchanged if entry and not entry.removed else diff.added).append(name)
            continue
        previous = entry.observed if entry else None
        observed = (
            previous
            if previous is not None and previous.hash == spec.schema_hash
            else PinnedDefinition(hash=spec.schema_hash, definition=tool_definition(spec))
        )
        after[name] = LockEntry(approved=approved, observed=observed)
        diff.pending.append(name)
        if entry is None or (approved is None and entry.removed):
            diff.added.append(name)
        elif approved is not None or (previous is not None and previous.hash != spec.schema_hash):
            diff.changed.append(name)
    for name, entry in sorted(before.items()):
        if name in listed:
            continue
        if entry.approved is not None:
            after[name] = LockEntry(approved=entry.approved, removed=True)
            if not entry.removed:
                diff.removed.append(name)
        elif not entry.removed:
            diff.removed.append(name)
    servers = dict(lock.servers)
    servers[catalog.server] = after
    return lock.model_copy(update={"servers": servers}), diff


# -- approval --------------------------------------------------------------------------------


def parse_selector(selector: str | None) -> tuple[str | None, str | None]:
    """``None`` → everything; ``SERVER`` → one server; ``SERVER/TOOL`` → one tool."""
    if selector is None or selector in ("", "*"):
        return None, None
    server, _, tool = selector.partition("/")
    return server, (tool or None)


def approve(lock: LockFile, selectors: Sequence[str | None] = (None,)) -> tuple[LockFile, list[str]]:
    """Approve the observed definitions (and removals) matched by ``selectors``.

    Returns the new lock and ``server/tool`` labels of what was approved. A selector that
    matches nothing pending is an error, so a typo never looks like success.
    """
    servers = {name: dict(tools) for name, tools in lock.servers.items()}
    done: list[str] = []
    for selector in selectors:
        want_server, want_tool = parse_selector(selector)
        if want_server is not None and want_server not in servers:
            raise CatalogError(f"no server {want_server!r} in the lock file; run 'codemode sync' first")
        matched = False
        for server, tools in servers.items():
            if want_server is not None and server != want_server:
                continue
            if want_tool is not None and want_tool not in tools:
                raise CatalogError(f"no tool {server}/{want_tool} in the lock file")
            for name, entry in list(tools.items()):
                if want_tool is not None and name != want_tool:
                    continue
                if entry.removed:
                    del tools[name]
                    done.append(f"{server}/{name} (removal)")
                    matched = True
                elif entry.observed is not None:
                    tools[name] = LockEntry(approved=entry.observed.model_copy(update={"at": _now()}))
                    done.append(f"{server}/{name}")
                    matched = True
                elif want_tool is not None:
                    matched = True  # already approved: approving again is a no-op, not an error
        if not matched and selector not in (None, "", "*"):
            raise CatalogError(f"nothing pending approval matches {selector!r}")
    return lock.model_copy(update={"servers": servers}), done


def revoke(lock: LockFile, server: str, tool: str) -> LockFile:
    """Withdraw an approval: the tool becomes ``new`` again and is unusable until re-approved."""
    entry = lock.entry(server, tool)
    if entry is None or entry.approved is None:
        raise CatalogError(f"{server}/{tool} is not approved")
    servers = {name: dict(tools) for name, tools in lock.servers.items()}
    servers[server][tool] = LockEntry(observed=entry.observed or entry.approved, removed=entry.removed)
    return lock.model_copy(update={"servers": servers})
