"""JSON Schema -> Python type expressions (and the TypedDicts/aliases they need).

The input is untrusted and may be anything: not a dict, self-referencing, exponentially
branching, megabytes deep. The rules are therefore "type what is clearly typeable, degrade the
rest to ``Any`` with a note", under hard limits:

* nesting depth (:data:`MAX_DEPTH`), schema nodes visited per module (:data:`MAX_NODES`),
  TypedDicts per module (:data:`MAX_TYPEDDICTS`), fields per TypedDict (:data:`MAX_FIELDS`),
  union members, literal values and the length of one type expression
  (:data:`MAX_EXPR_CHARS`).

Every :class:`PyType` carries its rendered text, computed bottom-up once; the text of a
composite is capped, so a DAG of ``$ref`` s that would expand exponentially collapses to
``Any`` instead of taking exponential time or memory.

Mapping (draft 4 to 2020-12, plus OpenAPI's ``nullable``):

======================================  ==============================================
``true`` / ``{}`` / no type information  ``_t.Any``
``false``                                ``_t.Never`` (a property with ``false`` is dropped)
string / integer / number / boolean     ``str`` / ``int`` / ``float`` / ``bool`` (``format`` noted)
null, ``nullable: true``                 ``None``, ``T | None``
``type: [a, b]``                         ``A | B``
``enum`` / ``const`` of scalars          ``_t.Literal[...]`` (``None`` split off as ``| None``)
array with ``items``                     ``list[T]`` (tuple forms -> ``list[Any]``)
object with ``properties``               a ``TypedDict`` (``NotRequired`` for optional keys)
object without properties                ``dict[str, T]`` from ``additionalProperties`` /
                                         ``patternProperties``, else ``dict[str, Any]``
``anyOf`` / ``oneOf``                    union of the members
``allOf``                                objects merged into one TypedDict when no property
                                         conflicts, a single typed member as itself, else Any
local ``$ref`` (JSON pointer)            the target: objects become named TypedDicts; other
                                         targets are inlined, or become a type alias when they
                                         recurse through a container
any other ``$ref``                       ``_t.Any`` - never fetched
======================================  ==============================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from codemode.stubs._module_types import AliasDef, FieldDef, ModuleTypes, TypedDictDef
from codemode.stubs._names import NameKind, base_identifier, pascal_case
from codemode.stubs._pytype import (
    ANY,
    BOOL,
    DICT_ANY,
    FLOAT,
    INT,
    LIST_ANY,
    MAX_UNION,
    NEVER,
    NONE,
    OVERSIZED,
    STR,
    PyType,
    dict_of,
    list_of,
    literal,
    named,
    union,
)
from codemode.stubs._schema_document import (
    MISSING,
    JsonMap,
    SchemaDocument,
    as_list,
    as_map,
    decode_pointer_token,
    description_of,
    local_pointer,
    note,
    str_items,
    variants,
)

__all__ = ["SchemaTyper"]

MAX_DEPTH: Final = 16
MAX_NODES: Final = 20_000
MAX_TYPEDDICTS: Final = 64
MAX_FIELDS: Final = 200
MAX_LITERALS: Final = 200
MAX_LITERAL_CHARS: Final = 200


_TYPE_KEYWORDS: Final = frozenset(
    [
        "type",
        "properties",
        "items",
        "prefixItems",
        "enum",
        "const",
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
        "additionalProperties",
        "patternProperties",
        "$dynamicRef",
        "$recursiveRef",
    ]
)


def _has_type_info(schema: object) -> bool:
    if isinstance(schema, bool):
        return not schema
    mapping = as_map(schema)
    return mapping is not None and any(key in mapping for key in _TYPE_KEYWORDS)


def _is_object_shaped(schema: object) -> bool:
    """An object schema with properties and nothing that would make it a union."""
    mapping = as_map(schema)
    if mapping is None:
        return False
    props = as_map(mapping.get("properties"))
    return (
        mapping.get("type", "object") == "object"
        and bool(props)
        and not any(k in mapping for k in ("anyOf", "oneOf", "allOf", "enum", "const", "$ref"))
    )


@dataclass(slots=True)
class _Inlining:
    containers: int
    alias: str | None = None


class SchemaTyper:
    """Types the schemas of one JSON document (an inputSchema or an outputSchema).

    ``root_name`` names the TypedDict of the document root if something refers to it (``#``).
    Notes explaining degradations are appended to the ``notes`` list passed to each call; they
    are untrusted text (they quote the schema) and are sanitised by the templates.
    """

    def __init__(self, module: ModuleTypes, root: object, root_name: str) -> None:
        self._module = module
        self._document = SchemaDocument(root)
        self._root_name = root_name
        self._refs: dict[str, PyType] = {}
        self._inlining: dict[str, _Inlining] = {}
        self._containers = 0

    # -- entry point ------------------------------------------------------------------------

    def type_of(self, schema: object, hint: str, depth: int, notes: list[str]) -> PyType:
        module = self._module
        module.nodes += 1
        if module.nodes > MAX_NODES:
            note(notes, "schema too large to type: Any")
            return ANY
        if depth > MAX_DEPTH:
            note(notes, f"nested deeper than {MAX_DEPTH} levels: Any")
            return ANY
        if schema is True:
            return ANY
        if schema is False:
            return NEVER
        mapping = as_map(schema)
        if mapping is None:
            note(notes, "invalid schema: Any")
            return ANY
        schema = mapping
        if "$ref" in schema:
            return self._checked(self._ref(schema["$ref"], hint, depth, notes), notes)
        for key in ("$dynamicRef", "$recursiveRef"):
            if key in schema:
                note(notes, f"{key} is not supported: Any")
                return ANY
        result = self._core(schema, hint, depth, notes)
        if schema.get("nullable") is True:
            result = union([result, NONE])
        return self._checked(result, notes)

    @staticmethod
    def _checked(result: PyType, notes: list[str]) -> PyType:
        if result is OVERSIZED:
            note(notes, "type too large to spell out: Any")
        return result

    # -- keywords ---------------------------------------------------------------------------

    def _core(self, schema: Mapping[str, Any], hint: str, depth: int, notes: list[str]) -> PyType:
        if "const" in schema:
            return self._enum([schema["const"]], notes)
        enum = as_list(schema.get("enum"))
        if enum is not None:
            return self._enum(enum, notes)
        if as_list(schema.get("allOf")):
            return self._all_of(schema, hint, depth, notes)
        options = variants(schema)
        if options:
            base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
            base_typed = _has_type_info(base)
            typed = [v for v in options if _has_type_info(v) or v is True]
            members = [
                self.type_of(v, f"{hint}Option{i}", depth + 1, notes) for i, v in enumerate(typed, start=1)
            ]
            if base_typed and len(typed) < len(options):
                # Constraint-only members ({"required": [...]}) narrow the sibling schema.
                members.append(self._core(base, hint, depth, notes))
            if members:
                return self._union(members, notes)
            if not base_typed:
                return ANY
            return self._core(base, hint, depth, notes)
        kind = schema.get("type")
        if as_list(kind) is not None:
            kinds = str_items(kind)
            if not kinds:
                return ANY
            return self._union([self._typed(schema, k, hint, depth, notes) for k in kinds], notes)
        if isinstance(kind, str):
            return self._typed(schema, kind, hint, depth, notes)
        if kind is not None:
            note(notes, "invalid 'type': Any")
            return ANY
        if any(k in schema for k in ("properties", "additionalProperties", "patternProperties")):
            return self._typed(schema, "object", hint, depth, notes)
        if any(k in schema for k in ("items", "prefixItems")):
            return self._typed(schema, "array", hint, depth, notes)
        return ANY

    def _union(self, members: list[PyType], notes: list[str]) -> PyType:
        result = union(members)
        if result is ANY and len(members) > MAX_UNION:
            note(notes, f"union of more than {MAX_UNION} types: Any")
        return result

    def _typed(self, schema: Mapping[str, Any], kind: str, hint: str, depth: int, notes: list[str]) -> PyType:
        simple = {"string": STR, "integer": INT, "number": FLOAT, "boolean": BOOL, "null": NONE}.get(kind)
        if simple is not None:
            fmt = schema.get("format")
            if isinstance(fmt, str) and kind != "null":
                note(notes, f"format: {fmt}")
            return simple
        if kind == "array":
            items = schema.get("items")
            if isinstance(items, list) or "prefixItems" in schema:
                note(notes, "tuple-shaped array typed as list[Any]")
                return LIST_ANY
            if items is None:
                return LIST_ANY
            self._containers += 1
            try:
                item = self.type_of(items, f"{hint}Item", depth + 1, notes)
            finally:
                self._containers -= 1
            return list_of(item)
        if kind == "object":
            return self._object(schema, hint, depth, notes)
        note(notes, f"unknown type {kind!r}: Any")
        return ANY

    def _object(self, schema: Mapping[str, Any], hint: str, depth: int, notes: list[str]) -> PyType:
        props = as_map(schema.get("properties"))
        if props:
            if not self._typeddict_possible(props, notes):
                return DICT_ANY
            name = self._module.new_name(hint)
            self._fill_typeddict(name, schema, depth, notes)
            return named(name)
        extra = schema.get("additionalProperties")
        patterns = as_map(schema.get("patternProperties"))
        self._containers += 1
        try:
            if as_map(extra) is not None or extra is True:
                return dict_of(self.type_of(extra, f"{hint}Value", depth + 1, notes))
            if patterns:
                values = [self.type_of(p, f"{hint}Value", depth + 1, notes) for p in patterns.values()]
                return dict_of(self._union(values, notes))
        finally:
            self._containers -= 1
        return DICT_ANY

    def _typeddict_possible(self, props: JsonMap, notes: list[str]) -> bool:
        if len(props) > MAX_FIELDS:
            note(notes, f"object with more than {MAX_FIELDS} properties typed as dict")
            return False
        if self._module.typeddicts >= MAX_TYPEDDICTS:
            note(notes, "too many nested object types in this tool: dict")
            return False
        return True

    def _fill_typeddict(self, name: str, schema: Mapping[str, Any], depth: int, notes: list[str]) -> None:
        module = self._module
        module.typeddicts += 1
        definition = TypedDictDef(name=name, description=description_of(schema))
        # Registered before the fields are typed, so definitions appear outer-first.
        module.definitions.append(definition)
        props = as_map(schema.get("properties")) or {}
        required = set(str_items(schema.get("required")))
        for key, sub in props.items():
            if sub is False:
                continue
            key = str(key)  # JSON keys are strings; a catalog built in Python might not be
            field_notes: list[str] = []
            hint = name + pascal_case(base_identifier(key, NameKind.PARAMETER))
            field_type = self.type_of(sub, hint, depth + 1, field_notes)
            definition.fields.append(
                FieldDef(key, field_type, key in required, description_of(sub), field_notes)
            )
        for key in sorted(required - set(props)):
            definition.fields.append(FieldDef(key, ANY, True, "", ["required but not described: Any"]))

    def _enum(self, values: list[Any], notes: list[str]) -> PyType:
        if not values:
            note(notes, "empty enum: Any")
            return ANY
        literal_ok = len(values) <= MAX_LITERALS and all(
            (isinstance(v, str) and len(v) <= MAX_LITERAL_CHARS) or isinstance(v, int) or v is None
            for v in values
        )
        if literal_ok:
            lits = [v for v in values if v is not None]
            parts = [literal(lits)] if lits else []
            if len(lits) < len(values):
                parts.append(NONE)
            return union(parts)
        note(notes, "enum values not expressible as Literal")
        return union(_json_type(v) for v in values)

    # -- allOf --------------------------------------------------------------------------------

    def _all_of(self, schema: Mapping[str, Any], hint: str, depth: int, notes: list[str]) -> PyType:
        parts = self.flatten_all_of(schema, notes)
        if parts is None:
            return ANY
        if any(resolved is False for _, resolved in parts):
            return NEVER
        typed = [(original, resolved) for original, resolved in parts if _has_type_info(resolved)]
        if not typed:
            return ANY
        if len(typed) == 1:
            # Type the member as written, so a lone {"$ref": ...} keeps its named TypedDict.
            return self.type_of(typed[0][0], hint, depth + 1, notes)
        maps = [m for _, r in typed if (m := as_map(r)) is not None]
        merged = _merge_objects(maps, notes)
        if merged is None or len(typed) != len(maps):
            note(notes, "allOf of non-object schemas: Any")
            return ANY
        return self._object(merged, hint, depth, notes)

    def flatten_all_of(
        self, schema: Mapping[str, Any], notes: list[str]
    ) -> list[tuple[object, object]] | None:
        """``(as written, resolved)`` for the schema's own keywords and every allOf member, recursively."""
        return self._document.flatten_all_of(schema, notes)

    # -- $ref ---------------------------------------------------------------------------------

    def resolve(self, schema: object) -> object:
        """``schema`` with a local ``$ref`` followed (unchanged when it has none or it fails)."""
        return self._document.resolve(schema)

    def _ref(self, ref: object, hint: str, depth: int, notes: list[str]) -> PyType:
        pointer = local_pointer(ref, notes)
        if pointer is None:
            return ANY
        cached = self._refs.get(pointer)
        if cached is not None:
            return cached
        inlining = self._inlining.get(pointer)
        if inlining is not None:
            if self._containers > inlining.containers:
                if inlining.alias is None:
                    inlining.alias = self._module.new_name(self._def_hint(pointer))
                return named(inlining.alias)
            note(notes, f"$ref {ref} refers to itself without nesting: Any")
            return ANY
        target = self._document.lookup(pointer)
        if target is MISSING:
            note(notes, f"unresolvable $ref {ref}: Any")
            return ANY
        object_schema = as_map(target) if _is_object_shaped(target) else None
        if object_schema is not None:
            props = as_map(object_schema["properties"]) or {}
            if not self._typeddict_possible(props, notes):
                self._refs[pointer] = DICT_ANY
                return DICT_ANY
            name = self._module.new_name(self._def_hint(pointer))
            result = named(name)
            self._refs[pointer] = result  # before the fields: recursion finds the name
            self._fill_typeddict(name, object_schema, depth, notes)
            return result
        state = _Inlining(self._containers)
        self._inlining[pointer] = state
        try:
            result = self.type_of(target, self._def_hint(pointer), depth + 1, notes)
        finally:
            del self._inlining[pointer]
        if state.alias is not None:
            self._module.definitions.append(AliasDef(state.alias, result, []))
            result = named(state.alias)
        # Caching also keeps a DAG of references linear instead of exponential.
        self._refs[pointer] = result
        return result

    def _def_hint(self, pointer: str) -> str:
        if not pointer:
            return self._root_name
        last = decode_pointer_token(pointer.rsplit("/", 1)[-1])
        return pascal_case(base_identifier(last, NameKind.PARAMETER))


def _merge_objects(parts: list[Mapping[str, Any]], notes: list[str]) -> dict[str, Any] | None:
    """Merge object schemas for allOf; None if some part is not an object schema."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for part in parts:
        if part.get("type", "object") != "object" or any(
            k in part for k in ("anyOf", "oneOf", "enum", "const")
        ):
            return None
        for key, sub in (as_map(part.get("properties")) or {}).items():
            if key in props and props[key] != sub:
                note(notes, f"allOf members disagree on property {key!r}: Any")
                props[key] = True
            else:
                props[key] = sub
        required.extend(str_items(part.get("required")))
    merged: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    for part in parts:
        desc = description_of(part)
        if desc:
            merged["description"] = desc
            break
    return merged


def _json_type(value: object) -> PyType:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, str):
        return STR
    if value is None:
        return NONE
    if isinstance(value, list):
        return LIST_ANY
    return DICT_ANY if isinstance(value, dict) else ANY
