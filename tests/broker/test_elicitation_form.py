"""complete_form: what a server gets for an answer to its form, whoever typed it."""

from __future__ import annotations

from typing import Any

import pytest

from codemode.broker._inputs import FormError, check_field, complete_form

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confirm": {"type": "boolean"},
        "reason": {"type": "string", "default": "routine cleanup", "maxLength": 20},
        "copies": {"type": "integer", "minimum": 1, "maximum": 5, "default": 1},
        "ratio": {"type": "number"},
        "colour": {"type": "string", "enum": ["red", "green"]},
        "size": {
            "type": "string",
            "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}],
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": ["confirm"],
}


def test_defaults_fill_what_the_answer_leaves_out() -> None:
    assert complete_form(SCHEMA, {"confirm": True}) == {
        "confirm": True,
        "reason": "routine cleanup",
        "copies": 1,
    }


def test_typed_text_becomes_the_fields_type() -> None:
    answer = complete_form(SCHEMA, {"confirm": "yes", "copies": "3", "ratio": "0.5", "tags": ["a"]})
    assert answer == {"confirm": True, "reason": "routine cleanup", "copies": 3, "ratio": 0.5, "tags": ["a"]}
    assert check_field("size", SCHEMA["properties"]["size"], "l") == "l"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ({}, "required field 'confirm'"),
        ({"confirm": "maybe"}, "takes yes or no"),
        ({"confirm": True, "copies": 9}, "at most 5"),
        ({"confirm": True, "copies": "two"}, "whole number"),
        ({"confirm": True, "copies": 1.5}, "whole number"),
        ({"confirm": True, "copies": True}, "takes a number"),
        ({"confirm": True, "reason": "x" * 21}, "at most 20 characters"),
        ({"confirm": True, "reason": 7}, "takes text"),
        ({"confirm": True, "colour": "blue"}, "one of ['red', 'green']"),
        ({"confirm": True, "size": "m"}, "one of ['s', 'l']"),
        ({"confirm": True, "tags": ["c"]}, "not among"),
        ({"confirm": True, "admin": True}, "no field 'admin'"),
    ],
)
def test_an_answer_that_does_not_fit_is_refused_with_the_reason(
    content: dict[str, Any], problem: str
) -> None:
    with pytest.raises(FormError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        complete_form(SCHEMA, content)


def test_a_field_type_a_form_cannot_hold_is_refused() -> None:
    with pytest.raises(FormError, match="cannot hold"):
        complete_form({"properties": {"nested": {"type": "object"}}}, {"nested": {}})
    with pytest.raises(FormError, match="not an object"):
        complete_form({"properties": ["confirm"]}, {})
