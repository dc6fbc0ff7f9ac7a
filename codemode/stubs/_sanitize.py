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
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Final

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


# Characters that are invisible or re-order text but are not control/format characters by
# category: variation selectors (used to smuggle bytes) and the Hangul fillers (render as blank).
_INVISIBLE_EXTRA: Final = frozenset(
    [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0), 0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800]
)


@functools.lru_cache(maxsize=4096)
def _replacement(char: str) -> str:
    """What a non-ASCII or control character becomes: itself, a space, a newline or nothing."""
    code = ord(char)
    if code in _INVISIBLE_EXTRA or 0xE0000 <= code <= 0xE007F:  # tag characters (all of the block)
        return ""
    category = unicodedata.category(char)
    # Cc controls (NUL, ESC, ...), Cf format (bidi overrides/isolates U+202A-202E and U+2066-2069,
    # zero-width space/joiners, BOM, soft hyphen), Co private use, Cs surrogates, Cn unassigned.
    if category in ("Cc", "Cf", "Co", "Cs", "Cn"):
        return ""
    if category in ("Zl", "Zp"):  # U+2028/2029 split lines for str.splitlines() and some editors
        return "\n"
    if category == "Zs":  # no-break and other exotic spaces
        return " "
    return char


# Everything outside printable ASCII, tab and newline goes through _replacement.
_SUSPECT: Final = re.compile(r"[^\t\n\x20-\x7e]")
_NEWLINES: Final = re.compile(r"\r\n?")
_BLANK_RUNS: Final = re.compile(r"\n{3,}")
_SPACE_RUNS: Final = re.compile(r"\s+")


def escape_invisible(text: str) -> str:
    """``text`` with every character :func:`clean_text` would drop or change written as a JSON
    ``\\uXXXX`` escape (astral ones as a surrogate pair), so a person sees that it is there.

    For text a person must judge exactly, such as the arguments of a call they are asked to
    approve: a right-to-left override or a zero-width space could otherwise make one value look
    like another. Escapes are valid inside a JSON string, so escaped JSON still parses to the
    same value.
    """
    return _SUSPECT.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if _replacement(char) == char:  # a visible character
        return char
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def clean_text(text: str, limit: int) -> str:
    """Strip invisible/bidi/control characters, normalise newlines and cap to ``limit`` characters.

    The result contains only printable characters, spaces and ``\\n``. Truncation is marked
    with an ellipsis. The input is cut early so that a megabyte of text costs no more than a
    few kilobytes of work.
    """
    # Invisible characters vanish, so look at a generous prefix rather than exactly `limit`.
    text = text[: limit * 4 + 64]
    text = _NEWLINES.sub("\n", text)
    text = _SUSPECT.sub(lambda m: _replacement(m.group()), text)
    # Line by line: a regex for "spaces before a newline" backtracks quadratically over a long
    # run of spaces that no newline ends.
    text = "\n".join(line.rstrip(" ") for line in text.replace("\t", "    ").split("\n"))
    text = _BLANK_RUNS.sub("\n\n", text).strip()
    if len(text) > limit:
        text = text[: max(limit - 1, 0)].rstrip() + "…"
    return text


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
