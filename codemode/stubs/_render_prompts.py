"""Render ``servers/<server>/_prompts.py``: one function per prompt, its arguments as parameters."""

from __future__ import annotations

from collections.abc import Sequence

from codemode.catalog import PromptSpec
from codemode.stubs import _astcheck
from codemode.stubs._names import NameKind, assign_identifiers
from codemode.stubs._sanitize import Untrusted
from codemode.stubs._templating import (
    MAX_FUNCTIONS,
    MAX_PARAMS,
    FunctionView,
    Param,
    paragraphs,
    render_template,
    summary_line,
)

__all__ = ["render_prompts"]


def render_prompts(server: str, prompts: Sequence[PromptSpec]) -> str:
    """``servers/<server>/_prompts.py``: one function per prompt."""
    omitted = max(len(prompts) - MAX_FUNCTIONS, 0)
    prompts = prompts[:MAX_FUNCTIONS]
    idents = assign_identifiers(
        (p.name for p in prompts), NameKind.PROMPT, where=f"prompts of server {server!r}"
    )
    functions: list[FunctionView] = []
    for prompt in prompts:
        args = prompt.arguments[:MAX_PARAMS]
        arg_idents = assign_identifiers(
            (a.name for a in args), NameKind.PARAMETER, where=f"arguments of prompt {prompt.name!r}"
        )
        params: list[tuple[bool, Param]] = []
        for arg in args:
            ident = arg_idents[arg.name]
            doc = (arg.description or "(no description)") + (
                f" (sent as {arg.name!r})" if ident != arg.name else ""
            )
            params.append(
                (
                    arg.required,
                    Param(
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
            FunctionView(
                ident=idents[prompt.name],
                summary=Untrusted(summary_line(prompt.description, prompt.title, prompt.name)),
                doc=Untrusted(paragraphs(prompt.title, prompt.description) or f"Prompt {prompt.name}."),
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
    source = render_template("prompts.py.j2", context)
    _astcheck.check_prompts_module(source)
    return source
