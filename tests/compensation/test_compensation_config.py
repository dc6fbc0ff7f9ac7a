"""``[compensation]``: its shape refused at load, its meaning at run start, each with the key."""

from __future__ import annotations

from typing import Any

import pytest

from codemode.catalog import ToolSpec
from codemode.config import CompensationRule, config_from_mapping
from codemode.engine._compensation_check import rule_problems
from codemode.errors import ConfigError

ADD = ToolSpec(
    server="notes",
    schema_hash="sha256:" + "0" * 64,
    name="add_note",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    output_schema={"type": "object", "properties": {"note_id": {"type": "string"}}},
)
DELETE = ToolSpec(
    server="notes",
    schema_hash="sha256:" + "0" * 64,
    name="delete_note",
    input_schema={"type": "object", "properties": {"note_id": {"type": "string"}}, "required": ["note_id"]},
)
LISTED = {"notes/add_note": ADD, "notes/delete_note": DELETE}
APPROVED = {"notes/add_note": True, "notes/delete_note": True}


def _rule(**fields: Any) -> CompensationRule:
    return CompensationRule.model_validate({"tool": "notes/delete_note", **fields})


@pytest.mark.parametrize(
    ("compensation", "said"),
    [
        ({"add_note": {"tool": "notes/delete_note"}}, 'compensation."add_note"]: the key is not a tool'),
        ({"notes/add_note": {"tool": "notes/*"}}, "'notes/*' is not a tool"),
        (
            {"notes/add_note": {"tool": "notes/d", "arguments": {"x": "note_id"}}},
            "'note_id' is not an argument",
        ),
        ({"notes/add_note": {"tool": "notes/d", "undo": 1}}, "undo"),
    ],
)
def test_a_misshapen_rule_is_refused_when_the_config_loads(compensation: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError, match="compensation") as caught:
        config_from_mapping({"compensation": compensation})
    assert said in str(caught.value)


def test_a_rule_that_fits_the_tools_has_no_problem() -> None:
    assert (
        rule_problems("notes/add_note", _rule(arguments={"note_id": "result.note_id"}), LISTED, APPROVED)
        == []
    )


@pytest.mark.parametrize(
    ("key", "rule", "listed", "approved", "problem"),
    [
        (
            "notes/erase",
            _rule(arguments={"note_id": "args.text"}),
            LISTED,
            APPROVED,
            ('compensation."notes/erase"', "no configured server lists the tool notes/erase"),
        ),
        (
            "notes/add_note",
            _rule(tool="notes/gone", arguments={"note_id": "args.text"}),
            LISTED,
            APPROVED,
            ('compensation."notes/add_note".tool', "no configured server lists the tool notes/gone"),
        ),
        (
            "notes/add_note",
            _rule(arguments={"note_id": "result.note_id"}),
            LISTED,
            {"notes/add_note": True, "notes/delete_note": False},
            (
                'compensation."notes/add_note".tool',
                "the tool notes/delete_note is not approved: review it with "
                "`codemode pin --approve notes/delete_note`",
            ),
        ),
        (
            "notes/add_note",
            _rule(arguments={"note_id": "result.id"}),
            LISTED,
            APPROVED,
            (
                'compensation."notes/add_note".arguments.note_id',
                "'result.id': notes/add_note has no result field 'id' (it has: note_id)",
            ),
        ),
        (
            "notes/add_note",
            _rule(arguments={"note_id": "args.customer"}),
            LISTED,
            APPROVED,
            (
                'compensation."notes/add_note".arguments.note_id',
                "'args.customer': notes/add_note has no argument 'customer' (it has: text)",
            ),
        ),
        (
            "notes/add_note",
            _rule(arguments={}),
            LISTED,
            APPROVED,
            (
                'compensation."notes/add_note".arguments',
                "notes/delete_note needs the argument 'note_id': map it to 'args.<name>' or 'result.<name>'",
            ),
        ),
        (
            "notes/add_note",
            _rule(arguments={"note_id": "result.note_id", "force": "args.text"}),
            LISTED,
            APPROVED,
            ('compensation."notes/add_note".arguments.force', "notes/delete_note takes no argument 'force'"),
        ),
    ],
)
def test_a_rule_that_cannot_work_is_refused_with_its_key(
    key: str,
    rule: CompensationRule,
    listed: dict[str, ToolSpec],
    approved: dict[str, bool],
    problem: tuple[str, str],
) -> None:
    assert rule_problems(key, rule, listed, approved) == [problem]
