"""Render ``servers/<server>/_resources.py``: a read function per resource and template.

A URI template (RFC 6570, levels 1 and 2) becomes a function of its variables that builds
the URI; any other template becomes a function of the whole URI.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from codemode.catalog import ResourceSpec, ResourceTemplateSpec
from codemode.stubs import _astcheck
from codemode.stubs._names import NameKind, assign_identifiers
from codemode.stubs._sanitize import Untrusted, pystr
from codemode.stubs._templating import (
    MAX_FUNCTIONS,
    MAX_PARAMS,
    FunctionView,
    Param,
    paragraphs,
    render_template,
    summary_line,
)

__all__ = ["render_resources"]

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
        if len(parts) > MAX_PARAMS:
            return None  # a function of hundreds of variables helps nobody (and nests deeply)
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
    functions: list[FunctionView] = []
    uses_quote = False
    for key, item in items:
        ident = idents[names[key]]
        if ident == "read":  # the generic reader owns this name
            ident = "read_"
        params: list[Param] = []
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
            FunctionView(
                ident=ident,
                summary=Untrusted(summary_line(item.description, item.title, item.name)),
                doc=Untrusted(paragraphs(item.title, item.description, where)),
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
    source = render_template("resources.py.j2", context)
    _astcheck.check_resources_module(source)
    return source


def _unique_names(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Map item keys to the name they are identified by; repeated names get their key appended."""
    counts: dict[str, int] = {}
    for _, name in pairs:
        counts[name] = counts.get(name, 0) + 1
    return {key: (name if counts[name] == 1 else f"{name} {key}") for key, name in pairs}


def _simple_param(ident: str) -> Param:
    return Param(
        ident=ident,
        key=Untrusted(ident),
        annotation="str",
        default=None,
        conditional=False,
        doc=Untrusted(""),
        comment=Untrusted(""),
    )
