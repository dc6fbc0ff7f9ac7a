"""Pages from the package's Jinja2 templates, with the headers every console answer carries."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse, Response

from codemode._text import escape_invisible

# The page runs only its own script and styles, cannot be framed (clickjacking an Approve
# button), posts only to itself, and is never cached (it shows live approvals and tokens).
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # "no-referrer" makes Chromium post "Origin: null"
    "cache-control": "no-store",
}

STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

# Link statuses of the evidence chain, as the page shows them (gaps in capitals, as on the CLI).
LINK_LABELS = {
    "ok": "✓ ok",
    "none": "– none",
    "n/a": "– n/a",
    "pending": "… pending",
    "missing": "✗ MISSING",
    "unverified": "? UNVERIFIED",
    "mismatch": "✗ MISMATCH",
}


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _epoch_when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


@functools.cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("codemode.serve.console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,  # a misspelt name is an error in tests, not a blank on the page
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["epoch_when"] = _epoch_when
    # Text a program, a server or a proposer chose, shown in a line of its own: invisible and
    # reordering characters escaped (autoescape already takes care of markup).
    env.filters["visible"] = escape_invisible
    return env


def page(template: str, context: Mapping[str, Any], status: int = 200) -> HTMLResponse:
    html = environment().get_template(template).render(link_labels=LINK_LABELS, **context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def static(name: str) -> Response:
    suffix = name[name.rfind(".") :] if "." in name else ""
    folder = resources.files("codemode.serve.console") / "static"
    if suffix not in STATIC_TYPES or "/" in name or name.startswith("."):
        return Response("not found\n", 404, headers=SECURITY_HEADERS, media_type="text/plain")
    target = folder / name
    if not target.is_file():
        return Response("not found\n", 404, headers=SECURITY_HEADERS, media_type="text/plain")
    return Response(target.read_bytes(), headers=SECURITY_HEADERS, media_type=STATIC_TYPES[suffix])
