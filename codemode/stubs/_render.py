"""Plan and render the modules of the tree from catalog values (Jinja2 templates + checks).

Planning (identifiers, types, defaults) happens here in Python; the templates in
``stubs_templates/`` only lay the pieces out. Untrusted text reaches them wrapped in
:class:`~codemode.stubs._sanitize.Untrusted`, and the environment's ``finalize`` hook refuses
to print one that did not pass a sanitising filter. Every rendered module is then parsed and
checked against an allow-list of node shapes (:mod:`codemode.stubs._astcheck`) before the
tree keeps it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import jinja2

from codemode._resources import resource_dir
from codemode.catalog import PromptSpec, ResourceSpec, ResourceTemplateSpec, ToolSpec
from codemode.errors import StubRenderError
from codemode.stubs import _astcheck
from codemode.stubs._names import KEYWORDS, NameKind, assign_identifiers, pascal_case
from codemode.stubs._sanitize import (
    TOOL_DOC_LIMIT,
    Untrusted,
    clean_text,
    comment,
    docline,
    docstring,
    first_sentence,
    pystr,
)
from codemode.stubs._schema import (
    ANY,
    NONE,
    AliasDef,
    ModuleTypes,
    PyType,
    SchemaTyper,
    TypedDictDef,
    as_map,
    description_of,
    is_json_scalar,
    str_items,
    union,
    variants,
)

__all__ = [
    "MAX_MODULE_CHARS",
    "ServerInitTool",
    "render_prompts",
    "render_resources",
    "render_root",
    "render_server_init",
    "render_tool",
    "tool_summary",
]

MAX_MODULE_CHARS: Final = 256_000
"""A tool module larger than this is re-rendered with less detail (see :func:`render_tool`)."""
MAX_PARAMS: Final = 256
MAX_DEFAULT_CHARS: Final = 200
MAX_FUNCTIONS: Final = 500
"""Resource/prompt functions per module; the rest stay reachable through ``read(uri=...)``."""
MAX_NOTES_CHARS: Final = 200
TITLE_LIMIT: Final = 200

Mode = Literal["full", "reduced", "generic"]


# ----------------------------------------------------------------------------- environment


def _finalize(value: object) -> object:
    if isinstance(value, Untrusted):
        raise StubRenderError("untrusted text reached a template without a sanitising filter")
    if value is None:
        raise StubRenderError("a template printed None")
    return value


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("stubs_templates"))),
        undefined=jinja2.StrictUndefined,
        # The output is Python, not HTML: HTML escaping would be wrong, and every untrusted
        # value is escaped by an explicit filter (enforced by _finalize).
        autoescape=False,  # noqa: S701
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_finalize,
        auto_reload=False,
    )
    env.filters["docstring"] = docstring
    env.filters["docline"] = docline
    env.filters["comment"] = comment
    env.filters["pystr"] = pystr
    return env


def _template(name: str) -> jinja2.Template:
    try:
        return _environment().get_template(name)
    except jinja2.TemplateError as exc:
        raise StubRenderError(f"stub template {name!r} is unusable: {exc}") from exc


def _render(name: str, context: Mapping[str, object]) -> str:
    try:
        return _template(name).render(context)
    except jinja2.TemplateError as exc:
        raise StubRenderError(f"rendering {name!r} failed: {exc}") from exc


# ----------------------------------------------------------------------------- tool modules


@dataclass(slots=True)
class _Param:
    ident: str
    key: Untrusted
    annotation: str
    default: str | None
    conditional: bool
    doc: Untrusted
    comment: Untrusted


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


def _summary(description: str | None, title: str | None, fallback: str) -> str:
    return first_sentence(description) or first_sentence(title) or fallback


def _paragraphs(*parts: str | None) -> str:
    return "\n\n".join(part for part in parts if part)


def tool_summary(spec: ToolSpec) -> str:
    """One cleaned line about a tool (not escaped for any source context)."""
    return _summary(spec.description, spec.title, "(no description)")


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
    params: list[_Param] = []
    input_notes: list[str] = []
    if mode == "generic":
        params.append(
            _Param(
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
    doc_text = _paragraphs(title, description, extra) or f"Call the tool {spec.name}."

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
    return _render("tool.py.j2", context)


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
    return ["Server hints (not verified): " + ", ".join(said) + "."]


def _plan_params(
    spec: ToolSpec, module: ModuleTypes, tool_pascal: str, mode: Mode, input_notes: list[str]
) -> list[_Param]:
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
    planned: list[tuple[bool, _Param]] = []
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
                _Param(
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


# ----------------------------------------------------------------------------- packages


@dataclass(frozen=True, slots=True)
class ServerInitTool:
    ident: str
    summary: str


def render_server_init(
    server: str,
    ident: str,
    tools: Sequence[ServerInitTool],
    *,
    resources: int,
    prompts: int,
    excluded: int,
) -> str:
    context: dict[str, object] = {
        "server_name": Untrusted(server),
        "ident": ident,
        "tools": [{"ident": t.ident, "summary": Untrusted(t.summary)} for t in tools],
        "resources": resources,
        "prompts": prompts,
        "excluded": excluded,
    }
    source = _render("server_init.py.j2", context)
    _astcheck.check_package_init(source, package=f"servers.{ident}", names=[t.ident for t in tools])
    return source


def render_root(servers: Sequence[tuple[str, str]]) -> str:
    """``servers/__init__.py``; ``servers`` is ``(ident, summary)`` pairs."""
    context: dict[str, object] = {
        "servers": [{"ident": ident, "summary": Untrusted(summary)} for ident, summary in servers]
    }
    source = _render("servers_init.py.j2", context)
    _astcheck.check_package_init(source, package="servers", names=[ident for ident, _ in servers])
    return source


# ----------------------------------------------------------------------------- resources


@dataclass(slots=True)
class _FunctionView:
    ident: str
    summary: Untrusted
    doc: Untrusted
    params: list[_Param]
    uri_expr: str = ""
    name: Untrusted = field(default_factory=lambda: Untrusted(""))
    required: list[_Param] = field(default_factory=lambda: [])
    optional: list[_Param] = field(default_factory=lambda: [])


_EXPRESSION: Final = re.compile(r"\{([^{}]*)\}")
_VARNAME: Final = re.compile(r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})(?:\.?(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2}))*")
# RFC 6570: simple expansion keeps only unreserved characters; "+" and "#" also keep reserved ones.
_SAFE_SIMPLE: Final = ""
_SAFE_RESERVED: Final = ":/?#[]@!$&'()*+,;="


def _uri_template_parts(template: str) -> list[tuple[str, str, str]] | None:
    """Split an RFC 6570 template into ``(literal, operator, variable)`` triples.

    Supports level 1 (``{var}``) and level 2 (``{+var}``, ``{#var}``) expressions with one
    variable each; returns None for anything else (the stub then takes the whole URI).
    """
    parts: list[tuple[str, str, str]] = []
    pos = 0
    for match in _EXPRESSION.finditer(template):
        literal = template[pos : match.start()]
        if "{" in literal or "}" in literal:
            return None
        body = match.group(1)
        operator = body[:1] if body[:1] in ("+", "#") else ""
        name = body[len(operator) :]
        if not _VARNAME.fullmatch(name):
            return None
        parts.append((literal, operator, name))
        pos = match.end()
    tail = template[pos:]
    if "{" in tail or "}" in tail:
        return None
    parts.append((tail, "", ""))
    return parts


def _uri_expression(parts: list[tuple[str, str, str]], idents: Mapping[str, str]) -> tuple[str, bool]:
    pieces: list[str] = []
    uses_quote = False
    for literal, operator, name in parts:
        text = literal + ("#" if operator == "#" else "")
        if text:
            pieces.append(pystr(text))
        if name:
            safe = _SAFE_RESERVED if operator else _SAFE_SIMPLE
            pieces.append(f"_quote({idents[name]}, safe={pystr(safe)})")
            uses_quote = True
    return (" + ".join(pieces) or pystr("")), uses_quote


def render_resources(
    server: str,
    resources: Sequence[ResourceSpec],
    templates: Sequence[ResourceTemplateSpec],
) -> str:
    """``servers/<server>/_resources.py``: one read function per resource and template."""
    items: list[tuple[str, ResourceSpec | ResourceTemplateSpec]] = [
        *((f"resource {r.name} {r.uri}", r) for r in resources),
        *((f"template {t.name} {t.uri_template}", t) for t in templates),
    ]
    items = list(dict(items).items())  # a resource listed twice is one resource
    omitted = max(len(items) - MAX_FUNCTIONS, 0)
    items = items[:MAX_FUNCTIONS]
    # The identifier comes from the resource name; the namespace key is made unique so two
    # resources with the same name (different URIs) are disambiguated, not merged.
    names = _unique_names([(key, "read_" + item.name) for key, item in items])
    idents = assign_identifiers(names.values(), NameKind.RESOURCE, where=f"resources of server {server!r}")
    functions: list[_FunctionView] = []
    uses_quote = False
    for key, item in items:
        ident = idents[names[key]]
        if ident == "read":  # the generic reader owns this name
            ident = "read_"
        params: list[_Param] = []
        if isinstance(item, ResourceSpec):
            where, uri_expr = f"Resource URI: {item.uri}", pystr(item.uri)
        elif (parts := _uri_template_parts(item.uri_template)) is None:
            where = f"URI template: {item.uri_template} (not expandable here: pass the full URI)"
            params, uri_expr = [_simple_param("uri")], "uri"
        else:
            variables = list(dict.fromkeys(name for _, _, name in parts if name))
            var_idents = assign_identifiers(
                variables, NameKind.PARAMETER, where=f"variables of resource template {item.uri_template!r}"
            )
            uri_expr, quoted = _uri_expression(parts, var_idents)
            uses_quote = uses_quote or quoted
            where = f"URI template: {item.uri_template}"
            params = [_simple_param(var_idents[v]) for v in variables]
        where += f" ({item.mime_type})" if item.mime_type else ""
        functions.append(
            _FunctionView(
                ident=ident,
                summary=Untrusted(_summary(item.description, item.title, item.name)),
                doc=Untrusted(_paragraphs(item.title, item.description, where)),
                params=params,
                uri_expr=uri_expr,
            )
        )
    context: dict[str, object] = {
        "server_name": Untrusted(server),
        "functions": functions,
        "uses_quote": uses_quote,
        "omitted": omitted,
    }
    source = _render("resources.py.j2", context)
    _astcheck.check_resources_module(source)
    return source


def _unique_names(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Map item keys to the name they are identified by; repeated names get their key appended."""
    counts: dict[str, int] = {}
    for _, name in pairs:
        counts[name] = counts.get(name, 0) + 1
    return {key: (name if counts[name] == 1 else f"{name} {key}") for key, name in pairs}


def _simple_param(ident: str) -> _Param:
    return _Param(
        ident=ident,
        key=Untrusted(ident),
        annotation="str",
        default=None,
        conditional=False,
        doc=Untrusted(""),
        comment=Untrusted(""),
    )


# ----------------------------------------------------------------------------- prompts


def render_prompts(server: str, prompts: Sequence[PromptSpec]) -> str:
    """``servers/<server>/_prompts.py``: one function per prompt."""
    omitted = max(len(prompts) - MAX_FUNCTIONS, 0)
    prompts = prompts[:MAX_FUNCTIONS]
    idents = assign_identifiers(
        (p.name for p in prompts), NameKind.PROMPT, where=f"prompts of server {server!r}"
    )
    functions: list[_FunctionView] = []
    for prompt in prompts:
        args = prompt.arguments[:MAX_PARAMS]
        arg_idents = assign_identifiers(
            (a.name for a in args), NameKind.PARAMETER, where=f"arguments of prompt {prompt.name!r}"
        )
        params: list[tuple[bool, _Param]] = []
        for arg in args:
            ident = arg_idents[arg.name]
            doc = (arg.description or "(no description)") + (
                f" (sent as {arg.name!r})" if ident != arg.name else ""
            )
            params.append(
                (
                    arg.required,
                    _Param(
                        ident=ident,
                        key=Untrusted(arg.name),
                        annotation="str" if arg.required else "str | None",
                        default=None if arg.required else "None",
                        conditional=not arg.required,
                        doc=Untrusted(doc),
                        comment=Untrusted(""),
                    ),
                )
            )
        ordered = [p for req, p in params if req] + [p for req, p in params if not req]
        functions.append(
            _FunctionView(
                ident=idents[prompt.name],
                summary=Untrusted(_summary(prompt.description, prompt.title, prompt.name)),
                doc=Untrusted(_paragraphs(prompt.title, prompt.description) or f"Prompt {prompt.name}."),
                params=ordered,
                name=Untrusted(prompt.name),
                required=[p for p in ordered if not p.conditional],
                optional=[p for p in ordered if p.conditional],
            )
        )
    context: dict[str, object] = {
        "server_name": Untrusted(server),
        "functions": functions,
        "omitted": omitted,
    }
    source = _render("prompts.py.j2", context)
    _astcheck.check_prompts_module(source)
    return source
