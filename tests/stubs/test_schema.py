"""JSON Schema -> Python types: mapping details and the limits that keep rendering bounded."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from codemode.stubs import render_tree
from codemode.stubs._module_types import ModuleTypes, TypedDictDef
from codemode.stubs._pytype import ANY, BOOL, FLOAT, INT, NONE, STR, literal, union
from codemode.stubs._render_tool import MAX_MODULE_CHARS
from codemode.stubs._schema import SchemaTyper
from codemode.stubs._schema_document import MAX_REF_HOPS

if TYPE_CHECKING:
    from .conftest import Kit


def type_text(schema: object, root: object = None) -> tuple[str, list[str], ModuleTypes]:
    module = ModuleTypes(reserved={"tool"})
    notes: list[str] = []
    result = SchemaTyper(module, root if root is not None else schema, "Root").type_of(schema, "T", 0, notes)
    return result.text, notes, module


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({}, "_t.Any"),
        (True, "_t.Any"),
        (False, "_t.Never"),
        ({"type": "string"}, "str"),
        ({"type": "integer"}, "int"),
        ({"type": "number"}, "float"),
        ({"type": "boolean"}, "bool"),
        ({"type": "null"}, "None"),
        ({"type": ["string", "null"]}, "str | None"),
        ({"type": "string", "nullable": True}, "str | None"),
        ({"enum": ["a", "b"]}, "_t.Literal['a', 'b']"),
        ({"enum": [1, True]}, "_t.Literal[1, True]"),
        ({"enum": [-1, 0]}, "_t.Literal[-1, 0]"),
        ({"const": "x"}, "_t.Literal['x']"),
        ({"enum": [None]}, "None"),
        ({"anyOf": [{"type": "string"}, {"const": "a"}]}, "str"),
        ({"type": "array", "items": {"type": "integer"}}, "list[int]"),
        ({"type": "array"}, "list[_t.Any]"),
        ({"type": "object"}, "dict[str, _t.Any]"),
        ({"additionalProperties": {"type": "number"}}, "dict[str, float]"),
        ({"items": {"type": "string"}}, "list[str]"),
        ({"type": "string", "anyOf": [{"format": "date"}, {"format": "date-time"}]}, "str"),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}, {"type": "null"}]}, "int | float | None"),
        ({"type": "bogus"}, "_t.Any"),
        ({"$ref": "https://example.com/x.json"}, "_t.Any"),
        ("not a schema", "_t.Any"),
    ],
)
def test_schemas_map_to_the_documented_types(schema: object, expected: str):
    assert type_text(schema)[0] == expected


def test_a_network_ref_is_never_fetched_and_explained():
    text, notes, _ = type_text({"$ref": "http://127.0.0.1:1/schema.json"})
    assert text == "_t.Any"
    assert any("not fetched" in n for n in notes)


def test_formats_are_noted():
    assert type_text({"type": "string", "format": "date-time"})[1] == ["format: date-time"]


def test_objects_become_typeddicts_with_required_and_notrequired_fields():
    text, _, module = type_text(
        {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
            "required": ["a"],
        }
    )
    assert text == "T"
    [definition] = module.definitions
    assert isinstance(definition, TypedDictDef)
    assert [(f.key, f.type.text, f.required) for f in definition.fields] == [
        ("a", "str", True),
        ("b", "int", False),
    ]


def test_typeddict_names_are_unique_within_a_module():
    module = ModuleTypes(reserved={"T"})
    assert module.new_name("T") == "T2"
    assert module.new_name("T") == "T3"
    assert module.new_name("list") == "list2"  # builtins are reserved
    assert module.new_name("bad-name") == "Type"


def test_union_normalisation_flattens_dedups_merges_literals_and_puts_none_last():
    assert union([NONE, STR, literal(["a"]), STR]).text == "str | None"
    assert union([literal(["a"]), literal(["b", 1])]).text == "_t.Literal['a', 'b', 1]"
    assert union([INT, ANY]).text == "_t.Any"
    assert union([FLOAT, literal([1])]).text == "float"
    assert union([BOOL, literal([True, "x"])]).text == "bool | _t.Literal['x']"


def test_defaults_are_checked_against_the_type():
    assert STR.accepts("x")
    assert not STR.accepts(1)
    assert [FLOAT.accepts(v) for v in (1, 1.5, True)] == [True, True, False]
    assert not INT.accepts(True)
    assert literal([1]).accepts(1)
    assert not literal([1]).accepts(True)
    assert union([STR, NONE]).accepts(None)


def test_a_default_that_does_not_fit_the_type_is_noted_not_rendered(kit: Kit):
    tool = kit.make_tool(
        "t",
        {
            "type": "object",
            "properties": {"n": {"type": "integer", "default": "ten"}, "s": {"enum": ["a"], "default": "b"}},
        },
    )
    source = render_tree([kit.catalog("crm", tool)]).read("servers/crm/t.py")
    assert "n: int | None = None," in source
    assert "server default: 'ten'" in source
    assert "s: _t.Literal['a'] | None = None," in source


def test_deep_nesting_degrades_to_any_instead_of_recursing_forever():
    schema: dict[str, object] = {"type": "string"}
    for _ in range(500):
        schema = {"type": "array", "items": schema}
    text, notes, _ = type_text(schema)
    assert "_t.Any" in text
    assert any("nested deeper" in n for n in notes)


def test_an_exponential_ref_dag_stays_small_and_fast():
    defs: dict[str, object] = {
        f"D{i}": {
            "anyOf": [
                {"type": "array", "items": {"$ref": f"#/$defs/D{i + 1}"}},
                {"type": "object", "additionalProperties": {"$ref": f"#/$defs/D{i + 1}"}},
            ]
        }
        for i in range(40)
    }
    defs["D40"] = {"type": "string"}
    root = {"$defs": defs}
    start = time.perf_counter()
    text, notes, _ = type_text({"$ref": "#/$defs/D0"}, root)
    assert time.perf_counter() - start < 2
    assert len(text) <= 2000
    assert any("too large" in n or "nested deeper" in n for n in notes)


def test_a_wide_but_shallow_ref_dag_collapses_to_any_when_its_text_would_be_huge():
    ref = "#/$defs/D{}"
    defs: dict[str, object] = {
        f"D{i}": {
            "type": ["array", "object"],
            "items": {"$ref": ref.format(i + 1)},
            "additionalProperties": {"$ref": ref.format(i + 1)},
        }
        for i in range(7)
    }
    defs["D7"] = {"enum": ["a-rather-long-literal-value", "another-rather-long-literal-value"]}
    text, notes, _ = type_text({"$ref": "#/$defs/D0"}, {"$defs": defs})
    assert len(text) <= 2000
    assert any("too large" in n for n in notes)


def test_a_huge_enum_falls_back_to_its_base_type():
    text, notes, _ = type_text({"enum": [f"v{i}" for i in range(1000)]})
    assert text == "str"
    assert notes


def test_an_object_with_too_many_properties_is_a_dict():
    text, _, _ = type_text(
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(500)}}
    )
    assert text == "dict[str, _t.Any]"


def test_a_self_referencing_alias_without_nesting_is_any():
    root = {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}}}
    text, notes, _ = type_text({"$ref": "#/$defs/A"}, root)
    assert text in ("_t.Any", "None")
    assert notes


def test_a_tool_with_thousands_of_required_parameters_degrades_to_a_generic_stub(kit: Kit):
    props = {f"param_{i:05d}_{'x' * 60}": {"type": "string", "description": "d" * 250} for i in range(3000)}
    tool = kit.make_tool("huge", {"type": "object", "properties": props, "required": list(props)})
    source = render_tree([kit.catalog("crm", tool)]).read("servers/crm/huge.py")
    assert len(source) <= MAX_MODULE_CHARS
    assert "arguments: dict[str, _t.Any]," in source


def test_json_pointer_escapes_are_resolved():
    root = {"$defs": {"a/b": {"type": "integer"}, "c~d": {"type": "boolean"}, "e f": {"type": "string"}}}
    assert type_text({"$ref": "#/$defs/a~1b"}, root)[0] == "int"
    assert type_text({"$ref": "#/$defs/c~0d"}, root)[0] == "bool"
    assert type_text({"$ref": "#/$defs/e%20f"}, root)[0] == "str"


def test_an_anchor_ref_is_not_resolved_in_allof_either():
    # "#thing" is an anchor, not a JSON pointer: it must not resolve to the document root.
    root = {"type": "object", "properties": {"x": {"type": "string"}}}
    text, notes, module = type_text({"allOf": [{"$ref": "#thing"}, {"type": "object"}]}, root=root)
    assert text == "_t.Any"
    assert any("anchor $ref #thing" in n for n in notes)
    assert not module.definitions


@pytest.mark.parametrize(
    ("ref", "root", "expected", "note"),
    [
        # Pointers into arrays: in range, out of range, not an index.
        ("#/items/1", {"items": [{"type": "string"}, {"type": "integer"}]}, "int", None),
        ("#/items/5", {"items": [{"type": "string"}]}, "_t.Any", "unresolvable $ref"),
        ("#/items/x", {"items": [{"type": "string"}]}, "_t.Any", "unresolvable $ref"),
        # Through a scalar: nothing to walk into.
        ("#/$defs/n/deeper", {"$defs": {"n": 3}}, "_t.Any", "unresolvable $ref"),
        ("#/$defs/missing", {"$defs": {}}, "_t.Any", "unresolvable $ref"),
    ],
)
def test_pointers_that_lead_nowhere_become_any_with_a_note(
    ref: str, root: object, expected: str, note: str | None
) -> None:
    text, notes, _ = type_text({"$ref": ref}, root)
    assert text == expected
    if note is not None:
        assert any(note in n for n in notes), notes


def test_a_ref_chain_longer_than_the_hop_limit_stops_with_a_note() -> None:
    hops = MAX_REF_HOPS + 5
    defs: dict[str, object] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(hops)}
    defs[f"d{hops}"] = {"type": "object"}
    # allOf follows a chain of refs to its end in one step, bounded by the hop limit.
    text, notes, _ = type_text({"allOf": [{"$ref": "#/$defs/d0"}]}, {"$defs": defs})
    assert text == "_t.Any"
    assert any("$ref chain too long" in n for n in notes), notes


def test_allof_with_a_member_that_leads_nowhere_is_any_with_a_note() -> None:
    schema = {
        "allOf": [{"$ref": "#/$defs/gone"}, {"type": "object", "properties": {"a": {"type": "string"}}}]
    }
    text, notes, _ = type_text(schema, {"$defs": {}})
    assert text == "_t.Any"
    assert any("unresolvable $ref" in n for n in notes), notes


def test_allof_members_are_merged_through_refs() -> None:
    root = {
        "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}
    }
    schema = {"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"name": {"type": "string"}}}]}
    _, _, module = type_text(schema, root)
    [typed] = [d for d in module.definitions if isinstance(d, TypedDictDef)]
    assert {f.key for f in typed.fields} == {"id", "name"}
