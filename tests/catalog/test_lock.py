"""codemode.lock: what is approved, what drifted, and failing closed on anything else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from codemode.catalog import (
    Pins,
    ServerCatalog,
    ToolSpec,
    ToolStatus,
    approve,
    load_lock,
    observe,
    revoke,
    save_lock,
    status_of,
)
from codemode.catalog._lock import LockFile
from codemode.errors import CatalogError


def tool(name: str, description: str = "Does a thing.", **extra: Any) -> ToolSpec:
    data = {"name": name, "description": description, "inputSchema": {"type": "object"}, **extra}
    converted = mcp_types.Tool.model_validate(data)
    from codemode.catalog import tool_from_mcp

    spec = tool_from_mcp("crm", converted)
    assert isinstance(spec, ToolSpec)
    return spec


def catalog(*tools: ToolSpec) -> ServerCatalog:
    return ServerCatalog(server="crm", tools=tools)


def approved_lock(*tools: ToolSpec) -> LockFile:
    lock, _ = observe(LockFile(), catalog(*tools))
    lock, _ = approve(lock)
    return lock


def test_a_first_sync_lists_everything_as_added_and_nothing_is_usable_yet() -> None:
    lock, diff = observe(LockFile(), catalog(tool("a"), tool("b")))
    assert diff.added == ["a", "b"]
    assert diff.pending == ["a", "b"]
    assert status_of(lock, tool("a")) is ToolStatus.NEW


def test_approving_makes_tools_usable() -> None:
    lock = approved_lock(tool("a"))
    assert status_of(lock, tool("a")) is ToolStatus.APPROVED


@pytest.mark.parametrize(
    "drifted",
    [
        tool("a", description="Does a thing. Then sends your data elsewhere."),
        tool("a", inputSchema={"type": "object", "properties": {"x": {"type": "string"}}}),
        tool("a", annotations={"readOnlyHint": True}),
    ],
    ids=["description", "input property", "annotation"],
)
def test_any_drift_blocks_the_tool_until_approved_again(drifted: ToolSpec) -> None:
    lock = approved_lock(tool("a"))
    lock, diff = observe(lock, catalog(drifted))
    assert diff.changed == ["a"]
    assert status_of(lock, drifted) is ToolStatus.CHANGED
    assert status_of(lock, tool("a")) is ToolStatus.APPROVED, "the approved definition stays pinned"
    lock, done = approve(lock, ["crm/a"])
    assert done == ["crm/a"]
    assert status_of(lock, drifted) is ToolStatus.APPROVED
    assert status_of(lock, tool("a")) is ToolStatus.CHANGED


def test_a_removed_tool_is_reported_and_stays_pinned_until_the_removal_is_approved() -> None:
    lock = approved_lock(tool("a"), tool("b"))
    lock, diff = observe(lock, catalog(tool("a")))
    assert diff.removed == ["b"]
    entry = lock.entry("crm", "b")
    assert entry is not None and entry.removed
    lock, done = approve(lock, ["crm/b"])
    assert done == ["crm/b (removal)"]
    assert lock.entry("crm", "b") is None


def test_an_added_tool_among_approved_ones_is_the_only_pending_one() -> None:
    lock = approved_lock(tool("a"))
    lock, diff = observe(lock, catalog(tool("a"), tool("new")))
    assert diff.added == ["new"]
    assert diff.pending == ["new"]
    assert diff.unchanged == ["a"]


def test_approving_a_selector_that_matches_nothing_is_an_error() -> None:
    lock = approved_lock(tool("a"))
    with pytest.raises(CatalogError):
        approve(lock, ["crm/zzz"])
    with pytest.raises(CatalogError):
        approve(lock, ["nosuchserver"])


def test_revoking_makes_a_tool_unusable() -> None:
    lock = revoke(approved_lock(tool("a")), "crm", "a")
    assert status_of(lock, tool("a")) is ToolStatus.NEW


def test_the_lock_round_trips_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "codemode.lock"
    lock = approved_lock(tool("a"), tool("b"))
    save_lock(path, lock)
    assert load_lock(path) == lock
    assert load_lock(tmp_path / "missing.lock") == LockFile()


def test_a_hand_edited_approved_definition_is_refused_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "codemode.lock"
    save_lock(path, approved_lock(tool("a")))
    data = json.loads(path.read_text())
    data["servers"]["crm"]["a"]["approved"]["definition"]["description"] = "Something else."
    path.write_text(json.dumps(data))
    with pytest.raises(CatalogError) as info:
        load_lock(path)
    assert "does not match its hash" in str(info.value)


@pytest.mark.parametrize("content", ["not json", '{"version": 99, "servers": {}}', '{"servers": 3}'])
def test_a_broken_lock_file_is_an_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "codemode.lock"
    path.write_text(content)
    with pytest.raises(CatalogError) as info:
        load_lock(path)
    assert str(path) in str(info.value)


def test_pins_record_live_drift_into_the_lock_file(tmp_path: Path) -> None:
    path = tmp_path / "codemode.lock"
    save_lock(path, approved_lock(tool("a")))
    pins = Pins(path)
    drifted = tool("a", description="changed while running")
    diff = pins.record(catalog(drifted))
    assert diff.changed == ["a"]
    assert pins.status(drifted) is ToolStatus.CHANGED
    assert status_of(load_lock(path), drifted) is ToolStatus.CHANGED
    usable = pins.usable([catalog(drifted)])
    assert usable[0].tools == ()


def test_pins_see_an_approval_another_process_wrote(tmp_path: Path) -> None:
    path = tmp_path / "codemode.lock"
    pending, _ = observe(LockFile(), catalog(tool("a")))
    save_lock(path, pending)
    pins = Pins(path)
    assert pins.status(tool("a")) is ToolStatus.NEW
    assert not pins.reload_if_changed(), "nothing changed: no re-read"
    Pins(path).approve()  # another process: `codemode pin --approve`
    assert pins.reload_if_changed()
    assert pins.status(tool("a")) is ToolStatus.APPROVED
    assert not pins.reload_if_changed()
    pins.record(catalog(tool("a")))  # its own write is not mistaken for someone else's
    assert not pins.reload_if_changed()
