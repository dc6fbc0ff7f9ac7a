"""strict_arguments at any depth: nested objects, arrays, composed schemas and references."""

from __future__ import annotations

from typing import Any

import pytest

from codemode.broker._decisions import Allow, Deny
from codemode.broker._facts import Facts
from codemode.broker.gates import ArgumentGate
from tests.broker._gate_calls import context, policy, spec

pytestmark = pytest.mark.anyio

NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "object", "properties": {"name": {"type": "string"}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "meta": {"type": "object", "properties": {"a": {}}, "additionalProperties": True},
        "free": {"type": "object"},
    },
}
REFERENCED: dict[str, Any] = {
    "$defs": {
        "Query": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "sub": {"anyOf": [{"$ref": "#/$defs/Query"}, {"type": "null"}]},
            },
        }
    },
    "type": "object",
    "properties": {"query": {"$ref": "#/$defs/Query"}},
}


COMPOSED: list[dict[str, Any]] = [
    {"allOf": [{"properties": {"name": {"type": "string"}}}, {"properties": {"limit": {}}}]},
    {"anyOf": [{"properties": {"name": {"type": "string"}}}, {"properties": {"limit": {}}}]},
    {
        "oneOf": [
            {"properties": {"name": {"type": "string"}}, "required": ["name"]},
            {"properties": {"limit": {}}, "required": ["limit"]},
        ]
    },
]


async def decide(
    schema: dict[str, Any], arguments: dict[str, Any], gate: ArgumentGate | None = None
) -> Allow | Deny:
    gate = gate or ArgumentGate(policy())
    decision = await gate.check(
        context(spec(schema=schema), arguments), Facts(pinned={"inputSchema": schema})
    )
    assert isinstance(decision, Allow | Deny)
    return decision


async def test_undeclared_keys_inside_a_declared_object_are_refused() -> None:
    arguments = {"query": {"name": "x", "tenant": "other", "principal": "admin"}}
    decision = await decide(NESTED, arguments)
    assert isinstance(decision, Deny) and decision.gate == "arguments"
    assert "'query.principal', 'query.tenant'" in decision.reason
    relaxed = ArgumentGate(policy(strict_arguments=False))
    assert isinstance(await decide(NESTED, arguments, relaxed), Allow), "strict_arguments off"


async def test_undeclared_keys_in_array_items_are_refused() -> None:
    decision = await decide(NESTED, {"items": [{"name": "a"}, {"name": "b", "tenant": "x"}]})
    assert isinstance(decision, Deny) and "'items[1].tenant'" in decision.reason


async def test_objects_the_schema_leaves_open_stay_open() -> None:
    assert isinstance(await decide(NESTED, {"meta": {"a": 1, "b": 2}, "free": {"any": {"thing": 1}}}), Allow)
    decision = await decide(NESTED, {"meta": {"b": 2}, "query": {"tenant": "x"}})
    assert (
        isinstance(decision, Deny) and "'query.tenant'" in decision.reason and "meta" not in decision.reason
    )


@pytest.mark.parametrize("composed", COMPOSED, ids=["allOf", "anyOf", "oneOf"])
async def test_a_composed_schema_allows_the_union_of_its_branches(composed: dict[str, Any]) -> None:
    schema = {"type": "object", **composed}
    assert isinstance(await decide(schema, {"name": "x"}), Allow)
    decision = await decide(schema, {"name": "x", "tenant": "other"})
    assert isinstance(decision, Deny) and "'tenant'" in decision.reason


async def test_references_are_followed_into_recursive_definitions() -> None:
    assert isinstance(await decide(REFERENCED, {"query": {"name": "x", "sub": {"name": "y"}}}), Allow)
    decision = await decide(REFERENCED, {"query": {"name": "x", "sub": {"sub": {"principal": "admin"}}}})
    assert isinstance(decision, Deny) and "'query.sub.sub.principal'" in decision.reason


async def test_a_reference_that_cannot_be_followed_fails_closed() -> None:
    # An embedded $id changes what "#/…" means below it: strict_arguments does not guess.
    schema: dict[str, Any] = {
        "$id": "https://tools.test/root",
        "type": "object",
        "properties": {"query": {"$ref": "#/$defs/Query"}},
        "$defs": {"Query": {"$id": "https://tools.test/query", "properties": {"name": {}}}},
    }
    decision = await decide(schema, {"query": {"name": "x"}})
    assert isinstance(decision, Deny) and "cannot be checked for undeclared arguments" in decision.reason


async def test_an_anchor_reference_is_not_read_as_a_pointer() -> None:
    """``#lax`` names the schema with ``$anchor: lax`` (open), not the top-level key ``lax``
    (closed): reading it as a pointer would check the call against a schema it is not validated
    against, and let an undeclared argument through."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"query": {"$ref": "#lax"}},
        "lax": {"type": "object", "properties": {"name": {}, "principal": {}}},
        "$defs": {"Open": {"$anchor": "lax", "type": "object", "properties": {"name": {}}}},
    }
    decision = await decide(schema, {"query": {"name": "x", "principal": "admin"}})
    assert isinstance(decision, Deny) and "cannot be checked for undeclared arguments" in decision.reason


@pytest.mark.parametrize("ref", ["#//lax", "#/lax/"])
async def test_empty_pointer_tokens_count_as_keys(ref: str) -> None:
    """``#//lax`` is ``schema[""]["lax"]`` to the validators (RFC 6901), not ``schema["lax"]``."""
    open_: dict[str, Any] = {"type": "object", "properties": {"name": {}}}
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"query": {"$ref": ref}},
        "lax": {"type": "object", "properties": {"name": {}, "principal": {}}, "": open_},
        "": {"lax": open_},
    }
    decision = await decide(schema, {"query": {"name": "x", "principal": "admin"}})
    assert isinstance(decision, Deny) and "'query.principal'" in decision.reason


D7 = "http://json-schema.org/draft-07/schema#"
BASE: dict[str, Any] = {"base": {"type": "object", "properties": {"q": {}}}}
IGNORED_BY_THE_DRAFT: dict[str, dict[str, Any]] = {
    "draft-07 $ref sibling properties": {
        "$schema": D7,
        "$ref": "#/definitions/base",
        "properties": {"tenant": {}},
        "definitions": BASE,
    },
    "draft-07 $ref sibling additionalProperties": {
        "$schema": D7,
        "$ref": "#/definitions/base",
        "additionalProperties": True,
        "definitions": BASE,
    },
    "draft-07 unevaluatedProperties": {
        "$schema": D7,
        "type": "object",
        "properties": {"q": {}},
        "unevaluatedProperties": True,
    },
    "draft-07 dependentSchemas": {
        "$schema": D7,
        "type": "object",
        "properties": {"q": {}},
        "dependentSchemas": {"q": {"properties": {"tenant": {}}}},
    },
    "2020-12 dependencies": {
        "type": "object",
        "properties": {"q": {}},
        "dependencies": {"q": {"properties": {"tenant": {}}}},
    },
}


@pytest.mark.parametrize("schema", IGNORED_BY_THE_DRAFT.values(), ids=IGNORED_BY_THE_DRAFT.keys())
async def test_keywords_the_schemas_draft_ignores_declare_nothing(schema: dict[str, Any]) -> None:
    """The validator of the schema's draft does not apply them, so they cannot declare (or open
    the object to) a key that the validator never checks."""
    decision = await decide(schema, {"q": 1, "tenant": "other"})
    assert isinstance(decision, Deny) and "'tenant'" in decision.reason
    assert isinstance(await decide(schema, {"q": 1}), Allow)


async def test_a_pointer_index_that_is_no_ascii_number_is_refused_not_a_crash() -> None:
    schema: dict[str, Any] = {
        "allOf": [{"type": "object"}],
        "type": "object",
        "properties": {"query": {"$ref": "#/allOf/\u00b2"}},
    }
    decision = await decide(schema, {"query": {"name": "x"}})
    assert isinstance(decision, Deny) and "cannot be checked for undeclared arguments" in decision.reason


async def test_a_draft_04_id_below_the_root_counts_as_an_embedded_base() -> None:
    """In draft-04 a nested ``id`` moves the base of the ``$ref``s below it: the walk does not guess."""
    inner: dict[str, Any] = {
        "id": "http://tools.test/inner",
        "type": "object",
        "properties": {"sub": {"$ref": "#/lax"}},
        "lax": {"type": "object", "properties": {"name": {}}},
    }
    schema: dict[str, Any] = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"q": inner, "id": {"type": "string"}},
        "lax": {"type": "object", "properties": {"name": {}, "principal": {}}},
    }
    decision = await decide(schema, {"q": {"sub": {"name": "x", "principal": "admin"}}})
    assert isinstance(decision, Deny) and "cannot be checked for undeclared arguments" in decision.reason
    del inner["id"]  # a property called "id" (its value is a schema) is no base URI
    assert isinstance(await decide(schema, {"id": "7", "q": {"sub": {"name": "x"}}}), Allow)


async def test_what_each_place_allows_is_worked_out_once_per_schema() -> None:
    gate = ArgumentGate(policy())
    assert isinstance(await decide(REFERENCED, {"query": {"name": "x", "sub": {"name": "y"}}}, gate), Allow)
    (built,) = gate._validators.values()  # pyright: ignore[reportPrivateUsage]
    assert not isinstance(built, str) and built.strictness is not None
    places = dict(built.strictness._levels)  # pyright: ignore[reportPrivateUsage]
    assert isinstance(await decide(REFERENCED, {"query": {"sub": {"name": "z"}}}, gate), Allow)
    assert built.strictness._levels == places  # pyright: ignore[reportPrivateUsage]


async def test_large_arguments_are_checked_too() -> None:
    arguments = {"items": [{"name": "x" * 100} for _ in range(200)] + [{"name": "y", "principal": "admin"}]}
    decision = await decide(NESTED, arguments)
    assert isinstance(decision, Deny) and "'items[200].principal'" in decision.reason


async def test_an_id_inside_an_instance_sets_no_base() -> None:
    """``default``, ``enum`` and ``examples`` hold instances: an object with an ``id`` there (a
    record's example, say) is no embedded base, so references are still followed."""
    schema: dict[str, Any] = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "query": {"$ref": "#/definitions/Query"},
            "default": {"type": "string"},
        },
        "definitions": {
            "Query": {
                "type": "object",
                "properties": {"name": {"enum": ["a", {"id": "q-3"}]}},
                "default": {"id": "q-1", "$id": "x"},
                "examples": [{"id": "q-2"}],
            }
        },
    }
    assert isinstance(await decide(schema, {"query": {"name": "a"}}), Allow)
    decision = await decide(schema, {"query": {"name": "a", "tenant": "t"}})
    assert isinstance(decision, Deny) and "'query.tenant'" in decision.reason
    # The same object as a schema (under a name in a map of schemas) is a base: not followed.
    schema["definitions"]["Query"]["properties"]["name"]["id"] = "http://tools.test/name"
    decision = await decide(schema, {"query": {"name": "a"}})
    assert isinstance(decision, Deny) and "cannot be checked for undeclared arguments" in decision.reason


async def test_a_reference_into_an_instance_is_not_followed() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"query": {"$ref": "#/properties/default/default"}, "default": {"default": {}}},
    }
    decision = await decide(schema, {"query": {"name": "a"}})
    assert isinstance(decision, Deny) and "cannot be checked for undeclared arguments" in decision.reason
    schema["properties"]["query"] = {"$ref": "#/properties/default"}
    assert isinstance(await decide(schema, {"query": "a"}), Allow)


async def test_a_dependency_named_like_an_instance_keyword_is_still_a_schema() -> None:
    """``dependencies`` maps property names to schemas: one named ``enum`` that sets an ``$id``
    is an embedded base like any other, so references are not followed."""
    schema: dict[str, Any] = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"q": {"$ref": "#/definitions/d"}},
        "definitions": {"d": {"type": "object", "properties": {"name": {}}}},
        "dependencies": {"enum": {"$id": "http://tools.test/inner", "definitions": {"d": {}}}},
    }
    decision = await decide(schema, {"q": {"name": "x", "tenant": "t"}})
    assert isinstance(decision, Deny) and "cannot be checked for undeclared arguments" in decision.reason
