"""Hints accepted at review (``codemode pin --accept-hints``): stored with the approved pin, bound
to its hash, never lower than the hints claim, and a lock file without them loads as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codemode.catalog import (
    LockFile,
    Pins,
    accept_hints,
    approve,
    claimed_risk,
    load_lock,
    observe,
    revoke,
    save_lock,
)
from codemode.errors import CatalogError
from tests.catalog.test_lock import approved_lock, catalog, tool

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False}
ADDITIVE = {"readOnlyHint": False, "destructiveHint": False}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True}


@pytest.mark.parametrize(
    ("annotations", "risk"),
    [
        ({"readOnlyHint": True}, "low"),
        (READ_ONLY, "low"),
        (ADDITIVE, "medium"),
        ({"destructiveHint": False}, "medium"),
        (DESTRUCTIVE, "high"),
        ({"readOnlyHint": True, "destructiveHint": True}, "high"),  # a contradiction: the worse
        ({"readOnlyHint": False}, "high"),
        ({"readOnlyHint": "yes"}, "high"),  # not a boolean: no claim
        ({}, "high"),
        (None, "high"),
        ("not an object", "high"),
    ],
)
def test_what_the_hints_claim(annotations: Any, risk: str) -> None:
    assert claimed_risk(annotations) == risk


def accepted(lock: LockFile, name: str) -> str | None:
    entry = lock.entry("crm", name)
    assert entry is not None and entry.approved is not None
    return entry.approved.accepted_risk


def hinted() -> LockFile:
    return approved_lock(
        tool("read", annotations=READ_ONLY),
        tool("add", annotations=ADDITIVE),
        tool("wipe", annotations=DESTRUCTIVE),
        tool("bare"),
    )


def test_accepting_stores_what_the_hints_claim_and_nothing_for_a_claim_of_high() -> None:
    lock, reviews = accept_hints(hinted())
    assert {r.label: r.claimed for r in reviews} == {
        "crm/read": "low",
        "crm/add": "medium",
        "crm/wipe": "high",
        "crm/bare": "high",
    }
    assert [accepted(lock, n) for n in ("read", "add", "wipe", "bare")] == ["low", "medium", None, None]


@pytest.mark.parametrize(
    ("selectors", "expected"),
    [
        (["crm/read"], {"read"}),
        (["crm/*"], {"read", "add"}),
        (["crm"], {"read", "add"}),
        (["*"], {"read", "add"}),
        (["crm/read", "crm/add"], {"read", "add"}),
    ],
)
def test_selectors_name_what_is_accepted(selectors: list[str], expected: set[str]) -> None:
    lock, _ = accept_hints(hinted(), selectors)
    assert {n for n in ("read", "add", "wipe", "bare") if accepted(lock, n)} == expected


@pytest.mark.parametrize("selector", ["crm/nope", "other", "other/*"])
def test_a_selector_naming_nothing_is_an_error(selector: str) -> None:
    with pytest.raises(CatalogError, match=r"no (tool|server)"):
        accept_hints(hinted(), [selector])


def test_an_empty_lock_says_to_sync_first() -> None:
    with pytest.raises(CatalogError, match="codemode sync"):
        accept_hints(LockFile())


def test_a_tool_not_approved_yet_is_not_accepted_alone_and_the_error_says_to_approve_it_too() -> None:
    pending, _ = observe(LockFile(), catalog(tool("read", annotations=READ_ONLY)))
    with pytest.raises(CatalogError) as info:
        accept_hints(pending, ["crm/read"])
    assert "codemode pin --approve --accept-hints crm/read" in str(info.value)
    both, done = approve(pending, ["crm/read"], require_pending=False)
    lock, _ = accept_hints(both, ["crm/read"])
    assert done == ["crm/read"] and accepted(lock, "read") == "low"


def test_the_acceptance_stays_while_the_tool_is_unchanged_and_goes_when_it_changes() -> None:
    lock, _ = accept_hints(approved_lock(tool("read", annotations=READ_ONLY)))
    lock, diff = observe(lock, catalog(tool("read", annotations=READ_ONLY)))
    assert diff.unchanged == ["read"] and accepted(lock, "read") == "low", "a sync at the same hash keeps it"

    changed = tool("read", description="Reads. Also sends it on.", annotations=READ_ONLY)
    lock, diff = observe(lock, catalog(changed))
    assert diff.changed == ["read"]
    with pytest.raises(CatalogError, match="--approve --accept-hints crm/read"):
        accept_hints(lock, ["crm/read"])  # a changed tool is reviewed before its hints are accepted
    lock, _ = approve(lock, ["crm/read"])
    assert accepted(lock, "read") is None, "the new definition was never accepted"


def test_revoking_drops_the_acceptance_with_the_approval(tmp_path: Path) -> None:
    lock, _ = accept_hints(approved_lock(tool("read", annotations=READ_ONLY)))
    lock = revoke(lock, "crm", "read")
    entry = lock.entry("crm", "read")
    assert entry is not None and entry.observed is not None and entry.observed.accepted_risk is None
    path = tmp_path / "codemode.lock"
    save_lock(path, lock)
    assert load_lock(path) == lock
    lock, _ = approve(lock, ["crm/read"])
    assert accepted(lock, "read") is None


def test_a_lock_file_written_before_accepted_hints_existed_loads_and_saves_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "codemode.lock"
    save_lock(path, approved_lock(tool("read", annotations=READ_ONLY), tool("bare")))
    written = path.read_text()
    assert "accepted_risk" not in written
    lock = load_lock(path)
    assert accepted(lock, "read") is None
    save_lock(path, lock)
    assert path.read_text() == written, "no new field appears in a lock that accepted nothing"


def test_the_acceptance_round_trips_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "codemode.lock"
    lock, _ = accept_hints(hinted())
    save_lock(path, lock)
    assert json.loads(path.read_text())["servers"]["crm"]["read"]["approved"]["accepted_risk"] == "low"
    assert load_lock(path) == lock


def edited(tmp_path: Path, name: str, part: str, value: object) -> Path:
    """A lock file with hints accepted, ``crm/add`` changed since, and one value set by hand."""
    path = tmp_path / "codemode.lock"
    lock, _ = accept_hints(hinted())
    lock, _ = observe(lock, catalog(tool("read", annotations=READ_ONLY), tool("add", description="new")))
    save_lock(path, lock)
    data = json.loads(path.read_text())
    data["servers"]["crm"][name][part]["accepted_risk"] = value
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("name", "part", "value", "words"),
    [
        ("read", "approved", "yes", ["read.approved.accepted_risk", "'low'"]),
        ("read", "approved", "high", ["read.approved.accepted_risk"]),
        ("read", "approved", 1, ["read.approved.accepted_risk"]),
        # Lower than the hints claim: a destructive tool made low by hand.
        ("wipe", "approved", "low", ["crm/wipe", "hints give 'high'"]),
        ("add", "approved", "low", ["crm/add", "hints give 'medium'"]),
        # Only an approved definition can hold one; an observed (unreviewed) one cannot.
        ("add", "observed", "medium", ["crm/add", "observed"]),
    ],
    ids=["not-a-risk", "high", "number", "below-a-destructive-claim", "below-the-claim", "observed"],
)
def test_a_hand_edited_acceptance_is_a_clear_error(
    tmp_path: Path, name: str, part: str, value: object, words: list[str]
) -> None:
    path = edited(tmp_path, name, part, value)
    with pytest.raises(CatalogError) as info:
        load_lock(path)
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message, message
    assert "version control" in message or "accept the hints again" in message


def test_pins_approve_and_accept_in_one_write_and_a_running_reader_sees_it(tmp_path: Path) -> None:
    path = tmp_path / "codemode.lock"
    pending, _ = observe(LockFile(), catalog(tool("read", annotations=READ_ONLY), tool("bare")))
    save_lock(path, pending)
    running = Pins(path)  # a `codemode serve` that started before the review
    done, reviews = Pins(path).accept_hints(["crm/*"], approve_first=True)
    assert sorted(done) == ["crm/bare", "crm/read"]
    assert {r.label: r.claimed for r in reviews} == {"crm/read": "low", "crm/bare": "high"}
    assert running.reload_if_changed()
    assert accepted(running.lock, "read") == "low"
    # Accepting again on what is approved already (no --approve) is the same acceptance.
    assert Pins(path).accept_hints(["crm/read"])[1][0].claimed == "low"


def test_the_stubs_say_which_hints_a_review_accepted(tmp_path: Path) -> None:
    from codemode.stubs import render_tree

    path = tmp_path / "codemode.lock"
    listed = catalog(tool("read", annotations=READ_ONLY), tool("peek", annotations=READ_ONLY))
    pending, _ = observe(LockFile(), listed)
    save_lock(path, pending)
    pins = Pins(path)
    pins.accept_hints(["crm/read"], approve_first=True)
    pins.approve(["crm/peek"])
    [usable] = pins.usable([listed])
    assert {t.name: t.hints_accepted for t in usable.tools} == {"read": True, "peek": False}
    assert {t.schema_hash for t in usable.tools} == {t.schema_hash for t in listed.tools}, (
        "not a new definition"
    )
    tree = render_tree([usable])
    assert "Server hints (accepted at review): read-only." in tree.read("servers/crm/read.py")
    assert "Server hints (not verified): read-only." in tree.read("servers/crm/peek.py")
