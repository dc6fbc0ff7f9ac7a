"""The Jinja2 side of rendering: the template environment and the view objects it receives.

Planning (identifiers, types, defaults) happens in Python (the ``_render_*`` modules); the
templates in ``stubs_templates/`` only lay the pieces out. Untrusted text reaches them wrapped
in :class:`~codemode.stubs._sanitize.Untrusted`, and the environment's ``finalize`` hook
refuses to print one that did not pass a sanitising filter. Every rendered module is then
parsed and checked against an allow-list of node shapes (:mod:`codemode.stubs._astcheck`)
before the tree keeps it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import jinja2

from codemode._resources import resource_dir
from codemode.errors import StubRenderError
from codemode.stubs._sanitize import Untrusted, comment, docline, docstring, first_sentence, pystr

__all__ = [
    "MAX_FUNCTIONS",
    "MAX_PARAMS",
    "FunctionView",
    "Param",
    "paragraphs",
    "render_template",
    "summary_line",
]

MAX_PARAMS: Final = 256
MAX_FUNCTIONS: Final = 500
"""Resource/prompt functions per module; the rest stay reachable through ``read(uri=...)``."""


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


def render_template(name: str, context: Mapping[str, object]) -> str:
    try:
        return _template(name).render(context)
    except jinja2.TemplateError as exc:
        raise StubRenderError(f"rendering {name!r} failed: {exc}") from exc


# ----------------------------------------------------------------------------- views


@dataclass(slots=True)
class Param:
    ident: str
    key: Untrusted
    annotation: str
    default: str | None
    conditional: bool
    doc: Untrusted
    comment: Untrusted


@dataclass(slots=True)
class FunctionView:
    ident: str
    summary: Untrusted
    doc: Untrusted
    params: list[Param]
    uri_expr: str = ""
    name: Untrusted = field(default_factory=lambda: Untrusted(""))
    required: list[Param] = field(default_factory=lambda: [])
    optional: list[Param] = field(default_factory=lambda: [])


def summary_line(description: str | None, title: str | None, fallback: str) -> str:
    return first_sentence(description) or first_sentence(title) or fallback


def paragraphs(*parts: str | None) -> str:
    return "\n\n".join(part for part in parts if part)
