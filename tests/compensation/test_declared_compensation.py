"""A compensation a server declares in a tool's ``_meta``: pinned with the tool, used only for a
trusted server, overridden by ``[compensation]``, refused at run start with its key when it
cannot work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from codemode.catalog import (
    COMPENSATION_META_KEY,
    Pins,
    ServerCatalog,
    ToolSpec,
    definition_hash,
    save_lock,
    tool_from_mcp,
)
from codemode.catalog._lock import tool_definition
from codemode.cli._pin_review import compensation_note
from codemode.config import Config, config_from_mapping
from codemode.engine._compensation_check import check_compensations, compensations_of
from codemode.errors import ConfigError
from codemode.testing import approved_pins
from tests.compensation._notes import ADD_THREE_THEN_FAIL, deploy_notes

UNDO = {"tool": "delete_note", "arguments": {"note_id": "result.note_id"}}
NOTE_OUT = {"type": "object", "properties": {"note_id": {"type": "string"}}}


def _listed(name: str = "add_note", meta: dict[str, Any] | None = None, takes: str = "text") -> ToolSpec:
    tool = mcp_types.Tool(
        name=name,
        input_schema={"type": "object", "properties": {takes: {"type": "string"}}},
        output_schema=NOTE_OUT,
        _meta=meta,  # pyright: ignore[reportCallIssue]
    )
    spec = tool_from_mcp("notes", tool)
    assert isinstance(spec, ToolSpec)
    return spec


def test_a_declared_compensation_is_part_of_the_pinned_definition() -> None:
    plain = _listed()
    declared = _listed(meta={COMPENSATION_META_KEY: UNDO, "other.vendor/x": 1})
    assert plain.compensation is None and declared.compensation == UNDO
    # Declaring one changes the hash (a pin binds it); the lock's copy re-hashes to the same value.
    assert declared.schema_hash != plain.schema_hash
    assert definition_hash(tool_definition(declared)) == declared.schema_hash
    assert tool_definition(declared)["_meta"] == {COMPENSATION_META_KEY: UNDO}
    # Any other _meta is neither kept nor hashed: a tool that declares none hashes as it always did.
    assert _listed(meta={"other.vendor/x": 2}).schema_hash == plain.schema_hash
    assert "_meta" not in tool_definition(plain)


@pytest.mark.parametrize(
    "declared",
    ["delete_note", ["delete_note"], {"tool": "delete_note", "pad": "x" * 5000}],
    ids=["a string", "a list", "oversized"],
)
def test_a_declaration_that_is_no_small_object_is_ignored(declared: Any) -> None:
    spec = _listed(meta={COMPENSATION_META_KEY: declared})
    assert spec.compensation is None and spec.schema_hash == _listed().schema_hash


def _pins(tmp_path: Path, catalogs: list[ServerCatalog]) -> Pins:
    save_lock(tmp_path / "codemode.lock", approved_pins(catalogs).lock)
    return Pins(tmp_path / "codemode.lock")


def _deployment(
    tmp_path: Path, *, trusted: bool, declared: Any, configured: dict[str, Any] | None = None
) -> tuple[Config, list[ServerCatalog], Pins]:
    config = config_from_mapping(
        {
            "servers": {"notes": {"command": "notes", "trusted": trusted}},
            "compensation": configured or {},
        }
    )
    add = _listed(meta={COMPENSATION_META_KEY: declared})
    delete = _listed("delete_note", takes="note_id")
    catalogs = [ServerCatalog(server="notes", tools=(add, delete))]
    return config, catalogs, _pins(tmp_path, catalogs)


def test_only_a_trusted_servers_declaration_is_used_and_configuration_overrides_it(tmp_path: Path) -> None:
    config, catalogs, pins = _deployment(tmp_path, trusted=True, declared=UNDO)
    rule = compensations_of(config, catalogs, pins).rules["notes/add_note"]
    assert (rule.tool, rule.arguments) == ("notes/delete_note", {"note_id": "result.note_id"})

    config, catalogs, pins = _deployment(tmp_path, trusted=False, declared=UNDO)
    assert compensations_of(config, catalogs, pins).rules == {}

    configured = {"notes/add_note": {"tool": "notes/add_note", "arguments": {"text": "args.text"}}}
    config, catalogs, pins = _deployment(tmp_path, trusted=True, declared=UNDO, configured=configured)
    assert compensations_of(config, catalogs, pins).rules["notes/add_note"].tool == "notes/add_note"


def test_a_declaration_nobody_approved_is_not_used(tmp_path: Path) -> None:
    config, catalogs, _ = _deployment(tmp_path, trusted=True, declared=UNDO)
    unapproved = _pins(tmp_path, [])
    assert compensations_of(config, catalogs, unapproved).rules == {}


@pytest.mark.parametrize(
    ("declared", "where", "said"),
    [
        ({"tool": "other/delete_note"}, "", "a tool of the same server"),
        ({"tool": "delete_note", "arguments": {"note_id": "note_id"}}, "", "is not an argument source"),
        ({"tool": "erase"}, ".tool", "no configured server lists the tool notes/erase"),
        (
            {"tool": "delete_note", "arguments": {"x": "result.id"}},
            ".arguments.x",
            "has no result field 'id'",
        ),
    ],
)
def test_a_trusted_declaration_that_cannot_work_is_left_out_with_its_key_and_blocks_nothing(
    tmp_path: Path, declared: dict[str, Any], where: str, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    configured = {"notes/delete_note": {"tool": "notes/add_note", "arguments": {"text": "args.note_id"}}}
    config, catalogs, pins = _deployment(tmp_path, trusted=True, declared=declared, configured=configured)
    found = compensations_of(config, catalogs, pins)
    assert set(found.rules) == {"notes/delete_note"}  # the configured rule stands; the declaration is out
    key = f'servers.notes tool add_note _meta."{COMPENSATION_META_KEY}"{where}'
    assert any(k == key and said in why for k, why in found.unusable), found.unusable
    with caplog.at_level("WARNING", logger="codemode.engine"):
        check_compensations(config, catalogs, pins)  # refuses nothing
    assert key in caplog.text


def test_a_configured_rule_that_cannot_work_is_still_refused(tmp_path: Path) -> None:
    configured = {"notes/add_note": {"tool": "notes/erase"}}
    config, catalogs, pins = _deployment(tmp_path, trusted=True, declared=UNDO, configured=configured)
    with pytest.raises(ConfigError, match=r'compensation\."notes/add_note"\.tool'):
        check_compensations(config, catalogs, pins)


def test_pin_review_says_whether_a_declaration_is_used() -> None:
    definition = {"name": "add_note", "_meta": {COMPENSATION_META_KEY: UNDO}}
    trusted = compensation_note("notes", "add_note", definition, trusted=True)
    untrusted = compensation_note("notes", "add_note", definition, trusted=False)
    assert trusted is not None and "notes/delete_note(note_id=result.note_id)" in trusted
    assert "used once approved" in trusted
    assert untrusted is not None and "not used: the server is not trusted" in untrusted
    assert '[compensation."notes/add_note"]' in untrusted
    broken = {"_meta": {COMPENSATION_META_KEY: {"tool": "x/y"}}}
    assert "cannot be used" in str(compensation_note("notes", "add_note", broken, trusted=True))
    assert compensation_note("notes", "add_note", {"name": "add_note"}, trusted=True) is None


@pytest.mark.integration
@pytest.mark.anyio
@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
async def test_a_run_is_undone_by_what_a_trusted_server_declares(tmp_path: Path, trusted: bool) -> None:
    notes = await deploy_notes(
        tmp_path, compensation={}, env={"NOTES_UNDO": json.dumps(UNDO)}, trusted=trusted
    )
    async with notes.engine() as engine:
        result = await engine.run(ADD_THREE_THEN_FAIL, compensate=True)
    assert result.status == "error" and result.compensation is not None
    if trusted:
        assert notes.held() == {} and result.outcome == "compensated"
        assert result.compensation.sent == 3
    else:
        # An untrusted server's claim is never acted on: the three notes stay, said so.
        assert len(notes.held()) == 3 and result.compensation.sent == 0
        assert {e.status for e in result.compensation.effects} == {"not compensable"}
