"""Render the package ``__init__`` modules: ``servers/`` and ``servers/<server>/``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from codemode.stubs import _astcheck
from codemode.stubs._sanitize import Untrusted
from codemode.stubs._templating import render_template

__all__ = ["ServerInitTool", "render_root", "render_server_init"]


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
    source = render_template("server_init.py.j2", context)
    _astcheck.check_package_init(source, package=f"servers.{ident}", names=[t.ident for t in tools])
    return source


def render_root(servers: Sequence[tuple[str, str]]) -> str:
    """``servers/__init__.py``; ``servers`` is ``(ident, summary)`` pairs."""
    context: dict[str, object] = {
        "servers": [{"ident": ident, "summary": Untrusted(summary)} for ident, summary in servers]
    }
    source = render_template("servers_init.py.j2", context)
    _astcheck.check_package_init(source, package="servers", names=[ident for ident, _ in servers])
    return source
