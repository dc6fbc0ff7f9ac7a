"""Make untrusted server text safe to place inside generated Python source.

Everything a server says about itself (tool names, titles, descriptions, parameter
descriptions, formats, URIs) is untrusted input: a poisoned description may try to close a
docstring and append code, hide instructions in invisible or bidi characters (the "Trojan
Source" family), or simply be a megabyte long. This module is the only place that turns such
text into source text, and it offers exactly four shapes:

* :func:`docstring` - free text for the inside of a triple-quoted docstring;
* :func:`docline` - the same, flattened to one line;
* :func:`comment` - one line for after a ``#``;
* :func:`pystr` - an exact string literal (``repr``), for values that must survive unchanged
  (provenance constants, argument names, URIs).

:class:`Untrusted` wraps server text on its way into the templates; the template environment
refuses to print it unless it went through one of these filters (see ``_templating.py``).
The character-level cleaning under them (:func:`clean_text`, :func:`escape_invisible`) lives in
:mod:`codemode._text`, because the broker shows server text to a person too.
"""

from __future__ import annotations

import re
from typing import Final

from codemode._text import clean_text, escape_invisible
from codemode.errors import StubRenderError

__all__ = [
    "Untrusted",
    "clean_text",
    "comment",
    "docline",
    "docstring",
    "escape_invisible",
    "first_sentence",
    "pystr",
]

TOOL_DOC_LIMIT: Final = 2_000
"""Characters of a tool description kept in its docstring."""
PARAM_DOC_LIMIT: Final = 300
"""Characters of a parameter or field description."""
SUMMARY_LIMIT: Final = 160
"""Characters of a one-line summary (index lines, search results)."""


class Untrusted:
    """Server-supplied text on its way into a template.

    It deliberately is not a ``str``: converting it implicitly (``{{ x }}``, ``~``, ``%``)
    raises, so a template can only use it through a sanitising filter.
    """

    __slots__ = ("text",)

    def __init__(self, text: str | None) -> None:
        self.text = text or ""

    def __str__(self) -> str:
        raise StubRenderError("untrusted text reached a template without a sanitising filter")

    def __repr__(self) -> str:
        return f"Untrusted({self.text[:40]!r})"

    def __bool__(self) -> bool:
        return bool(self.text)


def _raw(value: Untrusted | str | None) -> str:
    if value is None:
        return ""
    return value.text if isinstance(value, Untrusted) else value


_SPACE_RUNS: Final = re.compile(r"\s+")


# A double quote followed by another one (or by the end of the text) is escaped, so the text
# can never contain an unescaped run of three quotes nor end in one that merges with the
# closing delimiter.
_QUOTE_RUN: Final = re.compile(r'"(?="|\Z)')


def _escape_for_docstring(text: str) -> str:
    # Doubling every backslash first means no escape sequence of the text survives (no "\N{",
    # no "\x", no trailing backslash that would escape the closing quotes).
    return _QUOTE_RUN.sub(r'\\"', text.replace("\\", "\\\\"))


def docstring(value: Untrusted | str | None, limit: int = TOOL_DOC_LIMIT, indent: int = 0) -> str:
    """Text for the inside of a ``\"\"\"`` docstring; continuation lines get ``indent`` spaces."""
    text = _escape_for_docstring(clean_text(_raw(value), limit))
    if indent:
        pad = " " * indent
        text = "\n".join(pad + line if line else line for line in text.split("\n"))
        text = text.lstrip(" ")  # the first line continues the opening quotes
    return text


def docline(value: Untrusted | str | None, limit: int = SUMMARY_LIMIT) -> str:
    """:func:`docstring`, flattened to a single line."""
    return _escape_for_docstring(_one_line(_raw(value), limit))


def comment(value: Untrusted | str | None, limit: int = PARAM_DOC_LIMIT) -> str:
    """One line of text to follow a ``#``: no newline can end the comment early."""
    return _one_line(_raw(value), limit)


def _one_line(text: str, limit: int) -> str:
    text = _SPACE_RUNS.sub(" ", clean_text(text, limit * 2)).strip()
    if len(text) > limit:
        text = text[: max(limit - 1, 0)].rstrip() + "…"
    return text


def pystr(value: Untrusted | str | None) -> str:
    """An exact Python string literal for ``value``.

    ``repr`` escapes quotes, backslashes, newlines and every non-printable character (bidi
    controls, tags, zero-width characters are all non-printable), so the literal is one line
    and reads back to exactly the original string.
    """
    return repr(_raw(value))


_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s|\n\n")


def first_sentence(value: Untrusted | str | None, limit: int = SUMMARY_LIMIT) -> str:
    """The first sentence (or paragraph) of a description, cleaned and flattened to one line.

    The result is plain text, not escaped for any source context: pass it through a filter
    before it goes into a template.
    """
    text = clean_text(_raw(value), limit * 4)
    match = _SENTENCE_END.search(text)
    if match is not None:
        text = text[: match.start()]
    return _one_line(text, limit)
