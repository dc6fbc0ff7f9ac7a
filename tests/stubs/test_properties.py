"""Property tests: random JSON schemas and hostile strings always render inert, importable modules."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codemode.catalog import PromptArgumentSpec, PromptSpec, ResourceTemplateSpec
from codemode.errors import NameCollisionError
from codemode.stubs import render_tree

if TYPE_CHECKING:
    from .conftest import Kit

MARKER = "CODEMODE_STUBS_PROPERTY_PWNED"
PAYLOADS = [
    f'"""\n__import__("builtins").__setattr__("{MARKER}", 1)\n"""',
    f"'''\n__import__('builtins').__setattr__('{MARKER}', 1)\n'''",
    f"\\\"\"\"\n__import__('builtins').__setattr__('{MARKER}', 1)\n#",
    f"\n__import__('builtins').__setattr__('{MARKER}', 1)",
    "\\",
    '"',
    "\x00\u202e\U000e0041\u200b\u2028",
    "# -*- coding: utf-7 -*-",
    "{{ 7 * 7 }}{% raw %}",
]

hostile_text = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=[]), max_size=60),
    st.sampled_from(PAYLOADS),
    st.lists(st.sampled_from(PAYLOADS), min_size=1, max_size=3).map("".join),
)
hostile_name = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        ["class", "__init__", "_id", "id", "from", "str", "list", "1st", "a-b", "_idempotency_key"]
    ),
    st.sampled_from(PAYLOADS),
)
json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    hostile_text,
)
type_names = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array", "bogus"])
refs = st.one_of(
    st.sampled_from(
        ["#", "#/$defs/A", "#/$defs/B", "#/definitions/C", "#/properties/p", "#anchor", "#/$defs/Missing"]
    ),
    st.sampled_from(["https://evil.example/s.json", "other.json#/x", ""]),
    hostile_text,
    st.integers(),
)

leaf_schema = st.one_of(
    st.booleans(),
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.one_of(type_names, st.lists(type_names, max_size=3)),
            "description": hostile_text,
            "title": hostile_text,
            "format": hostile_text,
            "default": json_scalar,
            "enum": st.lists(json_scalar, max_size=5),
            "const": json_scalar,
            "nullable": st.booleans(),
            "$ref": refs,
        },
    ),
)


def _composite(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": st.dictionaries(hostile_name, children, max_size=4),
                "required": st.lists(hostile_name, max_size=3),
                "additionalProperties": st.one_of(st.booleans(), children),
                "patternProperties": st.dictionaries(hostile_text, children, max_size=2),
                "description": hostile_text,
            },
        ),
        st.fixed_dictionaries({"type": st.just("array")}, optional={"items": children}),
        st.fixed_dictionaries({"anyOf": st.lists(children, max_size=4)}),
        st.fixed_dictionaries({"oneOf": st.lists(children, max_size=4)}),
        st.fixed_dictionaries({"allOf": st.lists(children, max_size=3)}),
    )


schema = st.recursive(leaf_schema, _composite, max_leaves=25)

input_schema: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {
        "type": st.just("object"),
        "properties": st.dictionaries(hostile_name, schema, max_size=6),
    },
    optional={
        "required": st.lists(hostile_name, max_size=4),
        "$defs": st.fixed_dictionaries({}, optional={"A": schema, "B": schema}),
        "definitions": st.fixed_dictionaries({}, optional={"C": schema}),
        "anyOf": st.lists(schema, max_size=3),
        "allOf": st.lists(schema, max_size=2),
    },
)


def _import_everything(tree: Any, kit: Any) -> list[dict[str, Any]]:
    runtime = kit.FakeRuntime()
    with kit.importable(tree, runtime):
        for path in tree.files():
            if not path.endswith(".py"):
                continue
            module = importlib.import_module(
                path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            )
            for name in getattr(module, "__all__", []):
                value = getattr(module, name)
                if inspect.isfunction(value):
                    required = [
                        p.name
                        for p in inspect.signature(value).parameters.values()
                        if p.default is inspect.Parameter.empty
                    ]
                    if not required:
                        value()
    return runtime.calls


@given(
    tool_name=hostile_name,
    server=hostile_name,
    title=st.one_of(st.none(), hostile_text),
    description=st.one_of(st.none(), hostile_text),
    inputs=input_schema,
    output=st.one_of(st.none(), schema.filter(lambda s: isinstance(s, dict))),
    read_only=st.booleans(),
)
@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
def test_random_schemas_and_hostile_strings_render_inert_importable_modules(
    kit: Kit,
    tool_name: str,
    server: str,
    title: str | None,
    description: str | None,
    inputs: dict[str, Any],
    output: dict[str, Any] | None,
    read_only: bool,
):
    tool = kit.make_tool(
        tool_name,
        inputs,
        server=server,
        output=output,
        title=title,
        description=description,
        annotations={"readOnlyHint": True} if read_only else None,
    )
    tree = render_tree([kit.catalog(server, tool)])
    tree.render_all()  # rendering runs the ast allow-list on every module
    for path in tree.files():
        source = tree.read(path)
        ast.parse(source)
        source.encode("utf-8")  # exportable: no lone surrogates reach the source
    calls = _import_everything(tree, kit)
    assert not hasattr(builtins, MARKER)
    for call in calls:
        assert call["server"] == server
        assert call["tool"] == tool_name
        assert call["schema_hash"] == tool.schema_hash
        assert None not in call["arguments"].values() or not call["arguments"]


@given(
    names=st.lists(hostile_name, min_size=1, max_size=6, unique=True),
    text=hostile_text,
    template=hostile_text,
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_hostile_tool_resource_and_prompt_names_never_collide_silently(
    kit: Kit, names: list[str], text: str, template: str
):
    from codemode.catalog import ResourceSpec

    tools = [kit.make_tool(name, {"type": "object"}, description=text) for name in names]
    resources = [
        ResourceSpec(server="crm", uri=f"x://{i}/{text}", name=name, description=text)
        for i, name in enumerate(names)
    ]
    templates = [ResourceTemplateSpec(server="crm", uri_template=template, name=text or "t")]
    prompts = [
        PromptSpec(
            server="crm",
            name=name,
            description=text,
            arguments=tuple(PromptArgumentSpec(name=n, required=i % 2 == 0) for i, n in enumerate(names)),
        )
        for name in names
    ]
    tree = None
    try:
        tree = render_tree(
            [kit.catalog("crm", *tools, resources=resources, templates=templates, prompts=prompts)]
        )
        tree.render_all()
    except NameCollisionError as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        # Allowed, but only ever with both originals named: never a silent merge.
        assert "both map to" in message or "listed twice" in message
        return
    assert tree is not None
    modules = {tree.module_for_tool("crm", name) for name in names}
    assert len(modules) == len(names)
    _import_everything(tree, kit)
    assert not hasattr(builtins, MARKER)
