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

An approved definition may also hold ``accepted_risk``: the reviewer accepted the tool's own
hints (``codemode pin --accept-hints``), and the broker rates the tool by them although its
server is not trusted. It sits inside the approved definition, so it is bound to that hash: a
changed tool, approved again, starts without it. A lock file written before this field existed
loads unchanged.

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
from codemode.catalog._hashing import COMPENSATION_META_KEY, definition_hash
from codemode.catalog._hints import AcceptedRisk, ClaimedRisk, claimed_risk
from codemode.catalog._model import ServerCatalog, ToolSpec, ToolStatus
from codemode.errors import CatalogError

LOCK_VERSION = 1


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def tool_definition(spec: ToolSpec) -> dict[str, Any]:
    """The hashed part of a tool, in MCP wire names."""
    definition: dict[str, Any] = {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "inputSchema": spec.input_schema,
        "outputSchema": spec.output_schema,
        "annotations": spec.annotations,
    }
    if spec.compensation is not None:
        definition["_meta"] = {COMPENSATION_META_KEY: spec.compensation}
    return definition


class PinnedDefinition(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    hash: str
    definition: dict[str, Any]
    at: str = Field(default_factory=_now)
    """When it was approved (for ``approved``) or first seen (for ``observed``)."""
    accepted_risk: AcceptedRisk | None = None
    """The risk the definition's own hints give, when a reviewer accepted them for this tool
    (approved definitions only; see :func:`accept_hints`)."""


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

    def approved_pin(self, server: str, tool: str) -> PinnedDefinition | None:
        """The approved definition with what was accepted for it (its hints), or None."""
        entry = self.entry(server, tool)
        return entry.approved if entry else None

    def approved_definition(self, server: str, tool: str) -> dict[str, Any] | None:
        pinned = self.approved_pin(server, tool)
        return pinned.definition if pinned else None


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
                _verify_accepted(pinned, label, source, f"{server}/{name}")


def _verify_accepted(pinned: PinnedDefinition, label: str, source: str, tool: str) -> None:
    """An accepted risk is exactly what the pinned hints give: a hand edit cannot lower a tool's
    risk below its own claim, nor accept hints for a definition nobody approved."""
    accepted = pinned.accepted_risk
    if accepted is None:
        return
    redo = (
        "remove its 'accepted_risk' field and accept the hints again with "
        f"'codemode pin --accept-hints {tool}'"
    )
    if label != "approved":
        raise CatalogError(
            f"{source}: {tool}: the {label} definition holds accepted hints, which only an approved "
            f"one can; the lock file was edited: {redo}"
        )
    claimed = claimed_risk(pinned.definition.get("annotations"))
    if accepted != claimed:
        raise CatalogError(
            f"{source}: {tool}: accepted_risk is {accepted!r}, but the tool's hints give {claimed!r}; "
            f"the lock file was edited: {redo}"
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
        fix = "; restore it from version control, or correct that field" if where else ""
        raise CatalogError(f"{path}: not a valid codemode lock file ({where}: {first['msg']}){fix}") from exc
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
    """``None`` or ``*`` → everything; ``SERVER`` or ``SERVER/*`` → one server; ``SERVER/TOOL`` →
    one tool."""
    if selector is None or selector in ("", "*"):
        return None, None
    server, _, tool = selector.partition("/")
    return server, (None if tool in ("", "*") else tool)


def _selected(
    servers: dict[str, dict[str, LockEntry]], selector: str | None
) -> list[tuple[str, str, LockEntry]]:
    """The ``(server, tool, entry)`` that ``selector`` names; an unknown server or tool is an error."""
    want_server, want_tool = parse_selector(selector)
    if want_server is not None and want_server not in servers:
        raise CatalogError(f"no server {want_server!r} in the lock file; run 'codemode sync' first")
    found: list[tuple[str, str, LockEntry]] = []
    for server, tools in servers.items():
        if want_server is not None and server != want_server:
            continue
        if want_tool is not None and want_tool not in tools:
            raise CatalogError(f"no tool {server}/{want_tool} in the lock file")
        found += [(server, name, entry) for name, entry in tools.items() if want_tool in (None, name)]
    return found


def approve(
    lock: LockFile, selectors: Sequence[str | None] = (None,), *, require_pending: bool = True
) -> tuple[LockFile, list[str]]:
    """Approve the observed definitions (and removals) matched by ``selectors``.

    Returns the new lock and ``server/tool`` labels of what was approved. A selector that
    matches nothing pending is an error, so a typo never looks like success, unless
    ``require_pending`` is off (approving and accepting hints at once: approved tools match too).
    A newly approved definition holds no accepted hints: they were accepted for another one.
    """
    servers = {name: dict(tools) for name, tools in lock.servers.items()}
    done: list[str] = []
    for selector in selectors:
        _, want_tool = parse_selector(selector)
        matched = False
        for server, name, entry in _selected(servers, selector):
            tools = servers[server]
            if entry.removed:
                del tools[name]
                done.append(f"{server}/{name} (removal)")
                matched = True
            elif entry.observed is not None:
                tools[name] = LockEntry(approved=entry.observed.model_copy(update={"at": _now()}))
                done.append(f"{server}/{name}")
                matched = True
            elif want_tool is not None or not require_pending:
                matched = True  # already approved: approving again is a no-op, not an error
        if not matched and selector not in (None, "", "*"):
            raise CatalogError(f"nothing pending approval matches {selector!r}")
    return lock.model_copy(update={"servers": servers}), done


@dataclass(frozen=True)
class HintReview:
    """One approved tool whose hints a reviewer accepted (or tried to)."""

    server: str
    tool: str
    claimed: ClaimedRisk
    """The risk its hints give; ``high`` (no hints, or destructive) leaves nothing to accept."""

    @property
    def label(self) -> str:
        return f"{self.server}/{self.tool}"


def accept_hints(
    lock: LockFile, selectors: Sequence[str | None] = (None,)
) -> tuple[LockFile, list[HintReview]]:
    """Accept the hints of the approved tools matched by ``selectors``: each approved definition
    stores the risk its own hints give (never lower: ``destructiveHint: true`` stays high, and a
    tool without hints has nothing to accept).

    Only approved, unchanged tools take part: a new or changed definition must be approved
    first (``approve``, in the same write). A selector that matches no such tool is an error.
    """
    if not any(lock.servers.values()):
        raise CatalogError("the lock file lists no tools yet; run 'codemode sync' first")
    servers = {name: dict(tools) for name, tools in lock.servers.items()}
    reviews: list[HintReview] = []
    for selector in selectors:
        matched = [
            (server, name, entry)
            for server, name, entry in _selected(servers, selector)
            if entry.approved is not None and entry.observed is None and not entry.removed
        ]
        if not matched:
            what = "any tool" if selector in (None, "", "*") else repr(selector)
            both = " ".join(["codemode pin --approve --accept-hints", selector or ""]).strip()
            raise CatalogError(
                f"no approved, unchanged tool matches {what}: a new or changed tool is approved "
                f"and its hints accepted at once with '{both}'"
            )
        for server, name, entry in matched:
            assert entry.approved is not None
            claimed = claimed_risk(entry.approved.definition.get("annotations"))
            if claimed != "high":
                approved = entry.approved.model_copy(update={"accepted_risk": claimed})
                servers[server][name] = entry.model_copy(update={"approved": approved})
            review = HintReview(server, name, claimed)
            if review not in reviews:
                reviews.append(review)
    return lock.model_copy(update={"servers": servers}), reviews


def revoke(lock: LockFile, server: str, tool: str) -> LockFile:
    """Withdraw an approval: the tool becomes ``new`` again and is unusable until re-approved."""
    entry = lock.entry(server, tool)
    if entry is None or entry.approved is None:
        raise CatalogError(f"{server}/{tool} is not approved")
    servers = {name: dict(tools) for name, tools in lock.servers.items()}
    # Accepted hints go with the approval: approved again, the tool is reviewed again.
    pending = entry.observed or entry.approved.model_copy(update={"accepted_risk": None})
    servers[server][tool] = LockEntry(observed=pending, removed=entry.removed)
    return lock.model_copy(update={"servers": servers})
