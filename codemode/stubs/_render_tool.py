"""Plan and render ``servers/<server>/<tool>.py``: one typed function per tool.

The input schema becomes keyword-only parameters (required first) and the TypedDicts and
aliases they need; the output schema, when there is one, the return type. A module that comes
out too large is planned again with less detail (see :func:`render_tool`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from codemode.catalog import ToolSpec
from codemode.errors import StubRenderError
from codemode.stubs import _astcheck
from codemode.stubs._module_types import AliasDef, ModuleTypes, TypedDictDef
from codemode.stubs._names import KEYWORDS, NameKind, assign_identifiers, pascal_case
from codemode.stubs._pytype import ANY, NONE, PyType, union
from codemode.stubs._sanitize import TOOL_DOC_LIMIT, Untrusted, clean_text
from codemode.stubs._schema import SchemaTyper
from codemode.stubs._schema_document import as_map, description_of, is_json_scalar, str_items, variants
from codemode.stubs._templating import MAX_PARAMS, Param, paragraphs, render_template, summary_line

__all__ = ["MAX_MODULE_CHARS", "render_tool", "tool_summary"]

MAX_MODULE_CHARS: Final = 256_000
"""A tool module larger than this is re-rendered with less detail (see :func:`render_tool`)."""
MAX_DEFAULT_CHARS: Final = 200
MAX_NOTES_CHARS: Final = 200
TITLE_LIMIT: Final = 200

Mode = Literal["full", "reduced", "generic"]


@dataclass(slots=True)
class _FieldView:
    name: str
    key: Untrusted
    annotation: str
    literal: str
    comment: Untrusted


@dataclass(slots=True)
class _DefinitionView:
    kind: Literal["class", "functional", "alias"]
    name: str
    doc: Untrusted = field(default_factory=lambda: Untrusted(""))
    fields: list[_FieldView] = field(default_factory=lambda: [])
    literal: str = ""
    comment: Untrusted = field(default_factory=lambda: Untrusted(""))


def tool_summary(spec: ToolSpec) -> str:
    """One cleaned line about a tool (not escaped for any source context)."""
    return summary_line(spec.description, spec.title, "(no description)")


def render_tool(spec: ToolSpec, ident: str) -> str:
    """Render ``servers/<server>/<ident>.py`` for one tool and check it.

    Detail degrades instead of failing when the result would be huge: ``full`` (typed), then
    ``reduced`` (every parameter ``Any``, no nested types, short descriptions), then
    ``generic`` (a single ``arguments`` dict).
    """
    for mode in ("full", "reduced", "generic"):
        source = _render_tool(spec, ident, mode)
        if len(source) <= MAX_MODULE_CHARS:
            _astcheck.check_tool_module(source, ident)
            return source
    raise StubRenderError(
        f"tool {spec.name!r} of server {spec.server!r}: even the generic stub exceeds"
        f" {MAX_MODULE_CHARS:,} characters"
    )


def _render_tool(spec: ToolSpec, ident: str, mode: Mode) -> str:
    tool_pascal = pascal_case(ident)
    module = ModuleTypes(reserved={ident})
    notes_limit = 80 if mode != "full" else MAX_NOTES_CHARS
    params: list[Param] = []
    input_notes: list[str] = []
    if mode == "generic":
        params.append(
            Param(
                ident="arguments",
                key=Untrusted("arguments"),
                annotation="dict[str, _t.Any]",
                default=None,
                conditional=False,
                doc=Untrusted("The tool's arguments as a JSON object (its schema was too large to render)."),
                comment=Untrusted(""),
            )
        )
    else:
        params = _plan_params(spec, module, tool_pascal, mode, input_notes)

    returns, returns_doc = _plan_returns(spec, module, tool_pascal, mode)
    definitions = _definition_views(module, ident, notes_limit)

    # Each part is capped on its own (clean_text is idempotent, so the docstring filter's own,
    # larger cap never cuts again): the description keeps TOOL_DOC_LIMIT characters.
    description = clean_text(spec.description or "", TOOL_DOC_LIMIT if mode == "full" else 300)
    title = clean_text(spec.title or "", TITLE_LIMIT)
    extra = "\n".join([*_hint_lines(spec), *input_notes])
    doc_text = paragraphs(title, description, extra) or f"Call the tool {spec.name}."

    context: dict[str, object] = {
        "server_name": Untrusted(spec.server),
        "tool_name": Untrusted(spec.name),
        "schema_hash": Untrusted(spec.schema_hash),
        "summary": Untrusted(tool_summary(spec)),
        "ident": ident,
        "definitions": definitions,
        "params": params,
        "sent_always": [p for p in params if not p.conditional] if mode != "generic" else [],
        "conditional": [p for p in params if p.conditional],
        "generic": mode == "generic",
        "idempotency": not spec.read_only_hint,
        "returns": returns,
        "returns_doc": Untrusted(returns_doc),
        "doc": Untrusted(doc_text),
    }
    return render_template("tool.py.j2", context)


def _hint_lines(spec: ToolSpec) -> list[str]:
    annotations = spec.annotations or {}
    said: list[str] = []
    for key, text in (
        ("readOnlyHint", "read-only"),
        ("destructiveHint", "destructive"),
        ("idempotentHint", "idempotent"),
        ("openWorldHint", "open-world"),
    ):
        if annotations.get(key) is True:
            said.append(text)
    if not said:
        return []
    verdict = "accepted at review" if spec.hints_accepted else "not verified"
    return [f"Server hints ({verdict}): " + ", ".join(said) + "."]


def _plan_params(
    spec: ToolSpec, module: ModuleTypes, tool_pascal: str, mode: Mode, input_notes: list[str]
) -> list[Param]:
    typer = SchemaTyper(module, spec.input_schema, tool_pascal + "Arguments")
    properties, required = _top_level_properties(spec.input_schema, typer, input_notes)
    if len(properties) > MAX_PARAMS:
        # Keep every required parameter, drop optional ones beyond the cap (the server
        # applies its defaults to what is not sent).
        kept = [kv for kv in properties if kv[0] in required]
        room = max(MAX_PARAMS - len(kept), 0)
        kept += [kv for kv in properties if kv[0] not in required][:room]
        input_notes.append(f"{len(properties) - len(kept)} optional parameters are not exposed.")
        properties = kept
    idents = assign_identifiers(
        (key for key, _ in properties), NameKind.PARAMETER, where=f"parameters of tool {spec.name!r}"
    )
    planned: list[tuple[bool, Param]] = []
    for key, sub in properties:
        ident = idents[key]
        notes: list[str] = []
        ptype = typer.type_of(sub, tool_pascal + pascal_case(ident), 1, notes) if mode == "full" else ANY
        is_required = key in required
        default_src: str | None = None
        conditional = False
        annotation = ptype.text
        sub_map = as_map(sub)
        default: object = sub_map.get("default") if sub_map is not None else None
        has_default = sub_map is not None and "default" in sub_map
        if not is_required:
            if has_default and default is not None and _usable_default(ptype, default):
                default_src = repr(default)
            else:
                if has_default and default is not None:
                    notes.append(f"server default: {default!r}"[:MAX_NOTES_CHARS])
                annotation = union([ptype, NONE]).text
                default_src = "None"
                conditional = True
        doc = _param_doc(key, ident, sub, notes, mode)
        planned.append(
            (
                is_required,
                Param(
                    ident=ident,
                    key=Untrusted(key),
                    annotation=annotation,
                    default=default_src,
                    conditional=conditional,
                    doc=Untrusted(doc),
                    comment=Untrusted("; ".join(notes)) if mode == "full" else Untrusted(""),
                ),
            )
        )
    # Required first, each group in schema order.
    return [p for req, p in planned if req] + [p for req, p in planned if not req]


def _usable_default(ptype: PyType, value: object) -> bool:
    return is_json_scalar(value) and ptype.accepts(value) and len(repr(value)) <= MAX_DEFAULT_CHARS


def _param_doc(key: str, ident: str, sub: object, notes: list[str], mode: Mode) -> str:
    text = description_of(sub)
    if mode != "full":
        text = text[:80]
    parts = [text or "(no description)"]
    if ident != key:
        parts.append(f"(sent as {key!r})")
    if mode == "full":
        parts.extend(n for n in notes if n.startswith(("format:", "server default:")))
    return " ".join(parts)


def _top_level_properties(
    schema: Mapping[str, Any], typer: SchemaTyper, notes: list[str]
) -> tuple[list[tuple[str, Any]], set[str]]:
    """The parameters of a tool: its input schema's properties (after $ref/allOf/anyOf).

    Properties that only some ``anyOf``/``oneOf`` branches declare become optional
    parameters; a property is required when the schema or every branch requires it.
    """
    parts = typer.flatten_all_of(schema, [])
    if parts is None:
        notes.append("The input schema could not be read; the tool takes no parameters here.")
        return [], set()
    props: dict[str, Any] = {}
    required: set[str] = set()
    for _, raw_part in parts:
        part = as_map(raw_part)
        if part is None:
            continue
        _collect(part, props, required)
        branches = [b for b in (as_map(typer.resolve(v)) for v in variants(part)) if b is not None]
        if branches:
            branch_required: list[set[str]] = []
            for branch in branches:
                branch_props: dict[str, Any] = {}
                req: set[str] = set()
                _collect(branch, branch_props, req)
                for key, sub in branch_props.items():
                    props.setdefault(key, sub)
                branch_required.append(req)
            required |= set.intersection(*branch_required)
    for key in sorted(required - set(props)):
        props[key] = True  # required but not described: Any
    ordered = [(k, v) for k, v in props.items() if v is not False]
    return ordered, required


def _collect(part: Mapping[str, Any], props: dict[str, Any], required: set[str]) -> None:
    for key, sub in (as_map(part.get("properties")) or {}).items():
        props.setdefault(str(key), sub)
    required.update(str_items(part.get("required")))


_RETURNS_UNTYPED: Final = (
    "What the tool sends back: its structuredContent when present, otherwise its\n"
    "content - text parsed as JSON when it parses (else the string), images, audio and\n"
    "resources as codemode_runtime classes; one item bare, several as a list, none as None."
)


def _plan_returns(spec: ToolSpec, module: ModuleTypes, tool_pascal: str, mode: Mode) -> tuple[str, str]:
    if spec.output_schema is None or mode != "full":
        return "_t.Any", _RETURNS_UNTYPED
    typer = SchemaTyper(module, spec.output_schema, tool_pascal + "Result")
    notes: list[str] = []
    rtype = typer.type_of(spec.output_schema, tool_pascal + "Result", 0, notes)
    text = f"The tool's structured result ({rtype.text})."
    desc = description_of(spec.output_schema)
    if desc:
        text += " " + desc[:300]
    if notes:
        text += " Note: " + "; ".join(notes)
    return rtype.text, text


_CLASS_KEY: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_ANNOTATION_NAMES: Final = frozenset(["str", "int", "float", "bool", "list", "dict"])


def _definition_views(module: ModuleTypes, ident: str, notes_limit: int) -> list[_DefinitionView]:
    # A field name that is a keyword, or that would shadow a name the class body's annotations
    # use (the builtin types, the module's own types), forces the functional syntax.
    unsafe_keys = KEYWORDS | _ANNOTATION_NAMES | module.names
    views: list[_DefinitionView] = []
    for definition in module.definitions:
        if isinstance(definition, AliasDef):
            views.append(
                _DefinitionView(
                    kind="alias",
                    name=definition.name,
                    literal=repr(definition.type.text),
                    comment=Untrusted("; ".join(definition.notes)[:notes_limit]),
                )
            )
            continue
        views.append(_typeddict_view(definition, unsafe_keys, notes_limit))
    return views


def _typeddict_view(
    definition: TypedDictDef, unsafe_keys: frozenset[str], notes_limit: int
) -> _DefinitionView:
    class_syntax = all(
        _CLASS_KEY.fullmatch(f.key) is not None and f.key not in unsafe_keys for f in definition.fields
    )
    fields: list[_FieldView] = []
    for f in definition.fields:
        annotation = f.type.text if f.required else f"_t.NotRequired[{f.type.text}]"
        remark = " ".join(x for x in (f.description, "; ".join(f.notes)) if x)
        fields.append(
            _FieldView(
                name=f.key if class_syntax else "",
                key=Untrusted(f.key),
                annotation=annotation,
                literal=repr(annotation),
                comment=Untrusted(remark[: notes_limit + 200]),
            )
        )
    return _DefinitionView(
        kind="class" if class_syntax else "functional",
        name=definition.name,
        doc=Untrusted(definition.description),
        fields=fields,
    )
