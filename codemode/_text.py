"""Untrusted text made safe for a person to read: invisible, bidi and control characters.

Server text (a tool's description, a call's arguments) may hide instructions in invisible or
bidi characters (the "Trojan Source" family) or make one value look like another. Both the stubs
(generated source) and the broker (the consent prompt) show such text, so the character rules
live here, at the bottom of the house, once. Standard library only.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Final

__all__ = ["clean_text", "escape_invisible"]


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
