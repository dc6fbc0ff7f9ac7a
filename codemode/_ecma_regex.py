"""JSON Schema's regular expressions (ECMA-262) rewritten for RE2 and for Python's ``re``.

A schema's ``pattern`` and ``patternProperties`` are ECMA-262 regular expressions, searched for
anywhere in the string (as ``RegExp.prototype.test`` does), read here as with the ``u`` flag.
:func:`translate` parses one and writes it out twice, spelling out every construct whose
meaning differs between the dialects:

==========================  =========================================================
ECMA-262                    written as
==========================  =========================================================
``\\d`` ``\\w`` ``\\s``     explicit sets: ASCII digits, ASCII word characters, and
(and ``\\D`` ``\\W``        ECMA's whitespace (Unicode spaces and line terminators
``\\S``)                    included); Python's ``\\d`` would take any Unicode digit
``.``                       any character but ``\\n``, ``\\r``, U+2028 and U+2029
``^`` ``$``                 start and end of the text (Python's ``$`` would also match
                            before a final newline)
``\\b`` ``\\B``             ASCII word boundaries (Python compiles with ``re.ASCII``); ``\\B``
                            also matches an empty text
``\\uXXXX`` ``\\u{X…}``     the character (a surrogate pair escape is one character)
``\\cX`` ``\\0`` ``\\xHH``  the character
``[^]`` ``[]``              any character / no character
``(?<name>…)``              a plain group (names are only used by ``\\k<name>``)
``\\k<name>`` ``\\1``       a reference by number (Python only: RE2 has none)
``\\p{…}`` ``\\P{…}``       RE2's property classes (Python's ``re`` has none)
==========================  =========================================================

Accepted beyond strict ``u`` mode, as browsers do: ``{``, ``}`` and ``]`` that start no
quantifier or set are literals, and any punctuation may be escaped to mean itself. Refused:
an unknown letter escape (``\\q``), a group such as ``(?i)`` that ECMA-262 does not have, a
quantifier after a quantifier (``a*+``), unbalanced parentheses, a reversed range (``[z-a]``),
a reference to a group that does not exist.

Known differences left (all in patterns only Python's ``re`` runs, or in ``\\p``): a reference
to a group that has not matched matches the empty string in ECMA-262 but fails in Python, and
one ahead of its group is refused; Python's look-behind needs a fixed width; ``\\p{…}`` takes
the general categories and scripts RE2 knows (``gc=``/``sc=`` prefixes too), from RE2's Unicode
tables, and no binary property (``\\p{Alphabetic}``). Case folding does not arise: JSON Schema
has no flags. ``tests/broker/test_regex_dialect.py`` holds both translations to Node.js's answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["EcmaSyntaxError", "Translation", "translate"]

_MAX_CODE: Final = 0x10FFFF

Ranges = tuple[tuple[int, int], ...]


class EcmaSyntaxError(ValueError):
    """A pattern that is not an ECMA-262 regular expression (as read here)."""


@dataclass(frozen=True)
class Translation:
    re2: str
    """For RE2 (``\\A``/``\\z`` anchors; captures are not needed)."""
    python: str | None
    """For Python's ``re`` with ``re.ASCII``; None when it uses ``\\p{…}``, which ``re`` lacks."""
    backtracking: tuple[str, ...]
    """The constructs only a backtracking engine runs (look-arounds, back references), each
    named once: empty when RE2 can run the pattern."""


def _complement(ranges: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    start = 0
    for low, high in sorted(ranges):
        if low > start:
            out.append((start, low - 1))
        start = max(start, high + 1)
    if start <= _MAX_CODE:
        out.append((start, _MAX_CODE))
    return tuple(out)


_DIGITS: Final[Ranges] = ((0x30, 0x39),)
_WORD: Final[Ranges] = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE: Final[Ranges] = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
)
"""ECMA-262's WhiteSpace and LineTerminator: what ``\\s`` matches."""
_LINE_ENDS: Final[Ranges] = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_CLASSES: Final[dict[str, Ranges]] = {
    "d": _DIGITS,
    "D": _complement(_DIGITS),
    "w": _WORD,
    "W": _complement(_WORD),
    "s": _SPACE,
    "S": _complement(_SPACE),
}
_CONTROL_ESCAPES: Final = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}
_HEX: Final = frozenset("0123456789abcdefABCDEF")


def _char(code: int, python: bool) -> str:
    """One character as a literal of the target dialect: letters, digits and ``_`` as they are,
    anything else as a hex escape (so no metacharacter can slip through)."""
    if code < 0x80 and (chr(code).isalnum() or code == 0x5F):
        return chr(code)
    if not python:
        return f"\\x{{{code:X}}}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _set(ranges: Ranges, properties: tuple[str, ...], negated: bool, python: bool) -> str:
    if not ranges and not properties:  # [] matches nothing, [^] anything
        ranges, negated = ((0, _MAX_CODE),), not negated
    body = "".join(
        _char(low, python) if low == high else f"{_char(low, python)}-{_char(high, python)}"
        for low, high in ranges
    )
    return f"[{'^' if negated else ''}{body}{''.join(properties)}]"


def _group_names(pattern: str) -> tuple[dict[str, int], int]:
    """The number of each named group, and how many capturing groups there are (ECMA-262
    numbers them in the order their ``(`` appear, named or not)."""
    names: dict[str, int] = {}
    count = 0
    index, in_set = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_set:
            in_set = char != "]"
        elif char == "[":
            in_set = True
        elif char == "(":
            if not pattern.startswith("?", index + 1):
                count += 1
            elif pattern.startswith("?<", index + 1) and pattern[index + 3 : index + 4] not in ("=", "!"):
                count += 1
                end = pattern.find(">", index + 3)
                if end > 0:
                    names[pattern[index + 3 : end]] = count
        index += 1
    return names, count


class _Parser:
    """One pass over an ECMA-262 pattern, writing both dialects as it goes."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.at = 0
        self.re2: list[str] = []
        self.python: list[str] = []
        self.python_ok = True
        self.backtracking: list[str] = []
        self.names, self.groups = _group_names(pattern)

    def fail(self, what: str) -> EcmaSyntaxError:
        return EcmaSyntaxError(f"{what} at position {self.at} of {self.pattern!r}")

    def emit(self, re2: str, python: str | None = None) -> None:
        self.re2.append(re2)
        self.python.append(re2 if python is None else python)

    def emit_char(self, code: int) -> None:
        self.emit(_char(code, False), _char(code, True))

    def emit_set(self, ranges: Ranges, properties: tuple[str, ...] = (), negated: bool = False) -> None:
        if properties:
            self.python_ok = False
        self.emit(_set(ranges, properties, negated, False), _set(ranges, (), negated, True))

    def needs(self, construct: str) -> None:
        if construct not in self.backtracking:
            self.backtracking.append(construct)

    def peek(self, text: str) -> bool:
        return self.pattern.startswith(text, self.at)

    def run(self) -> Translation:
        depth = 0
        quantifiable = False  # whether a quantifier may follow what came before
        while self.at < len(self.pattern):
            char = self.pattern[self.at]
            self.at += 1
            bounds = self._counted() if char == "{" else None
            if char in "*+?" or bounds is not None:
                if not quantifiable:
                    raise self.fail("nothing to repeat")
                if bounds is not None:
                    self.at = bounds[1]
                    self.emit(bounds[0])
                else:
                    self.emit(char)
                if self.peek("?"):  # a lazy quantifier
                    self.at += 1
                    self.emit("?")
                quantifiable = False
                continue
            quantifiable = True
            if char == "\\":
                quantifiable = self._escape()
            elif char == "[":
                self._set()
            elif char == "(":
                depth += 1
                quantifiable = False
                self._open_group()
            elif char == ")":
                depth -= 1
                if depth < 0:
                    raise self.fail("unmatched ')'")
                self.emit(")")
            elif char == "|":
                quantifiable = False
                self.emit("|")
            elif char == ".":
                self.emit_set(_LINE_ENDS, negated=True)
            elif char == "^":
                quantifiable = False
                self.emit("\\A")
            elif char == "$":
                quantifiable = False
                self.emit("\\z", "\\Z")
            else:
                self.emit_char(ord(char))
        if depth:
            raise self.fail("missing ')'")
        python = "".join(self.python) if self.python_ok else None
        return Translation("".join(self.re2), python, tuple(self.backtracking))

    def _counted(self) -> tuple[str, int] | None:
        """``{n}``, ``{n,}`` or ``{n,m}`` just before ``self.at`` (its text and end), or None
        when the ``{`` is a literal."""
        end = self.pattern.find("}", self.at)
        if end < 0:
            return None
        low, comma, high = self.pattern[self.at : end].partition(",")
        if not (low.isascii() and low.isdigit()) or (high and not (high.isascii() and high.isdigit())):
            return None
        if high and int(high) < int(low):
            raise self.fail("numbers out of order in a {} quantifier")
        return "{" + low + comma + high + "}", end + 1

    def _open_group(self) -> None:
        if not self.peek("?"):
            self.emit("(")
            return
        for opener, name in (("?:", None), ("?=", "a look-ahead"), ("?!", "a look-ahead")):
            if self.peek(opener):
                self.at += 2
                self._lookaround(opener, name)
                return
        for opener in ("?<=", "?<!"):
            if self.peek(opener):
                self.at += 3
                self._lookaround(opener, "a look-behind")
                return
        if self.peek("?<"):
            end = self.pattern.find(">", self.at)
            if end < 0:
                raise self.fail("unterminated group name")
            self.at = end + 1
            self.emit("(")
            return
        raise self.fail("unknown group syntax '(?'")

    def _lookaround(self, opener: str, name: str | None) -> None:
        if name is not None:
            self.needs(name)
        self.emit("(" + opener)

    def _escape(self) -> bool:
        """The escape after a backslash outside a set; whether a quantifier may follow it."""
        if self.at >= len(self.pattern):
            raise self.fail("'\\' at the end")
        char = self.pattern[self.at]
        self.at += 1
        if char in _CLASSES:
            self.emit_set(_CLASSES[char])
        elif char == "b":
            self.emit("\\b")
            return False
        elif char == "B":
            # RE2's \B (and Python's before 3.14) never matches in an empty text; ECMA's does.
            self.emit("(?:\\B|\\A\\z)", "(?:\\B|\\A\\Z)")
            return False
        elif char == "k":
            self._reference(self._name())
        elif char in "123456789":
            start = self.at - 1
            while self.at < len(self.pattern) and self.pattern[self.at] in "0123456789":
                self.at += 1
            self._reference(int(self.pattern[start : self.at]))
        elif char in "pP":
            self.emit_set((), (self._property(char),))
        else:
            self.emit_char(self._character(char))
        return True

    def _name(self) -> int:
        if not self.peek("<"):
            raise self.fail("'\\k' without a <name>")
        end = self.pattern.find(">", self.at)
        number = self.names.get(self.pattern[self.at + 1 : end]) if end > 0 else None
        if number is None:
            raise self.fail("'\\k' names no group")
        self.at = end + 1
        return number

    def _reference(self, number: int) -> None:
        if number > self.groups:
            raise self.fail(f"a reference to group {number}, which does not exist")
        self.needs("a back reference")
        # RE2 refuses it (its text is never compiled: ``backtracking`` says why); the group
        # around the number keeps a digit after it from joining it.
        self.emit(f"(?:\\{number})")

    def _property(self, kind: str) -> str:
        if not self.peek("{"):
            raise self.fail(f"'\\{kind}' without a {{property}}")
        end = self.pattern.find("}", self.at)
        if end < 0:
            raise self.fail("unterminated property")
        name = self.pattern[self.at + 1 : end]
        self.at = end + 1
        key, equals, value = name.partition("=")
        if equals:
            if key not in ("General_Category", "gc", "Script", "sc"):
                raise self.fail(f"the property {key!r} is not supported")
            name = value
        if not name or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
            raise self.fail(f"the property {name!r} is not supported")
        return f"\\{kind}{{{name}}}"

    def _character(self, char: str) -> int:
        """The character an escape such as ``\\n``, ``\\x41`` or ``\\/`` stands for."""
        if char in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[char]
        if char == "0" and not (self.at < len(self.pattern) and self.pattern[self.at].isdigit()):
            return 0
        if char == "c":
            letter = self.pattern[self.at : self.at + 1]
            if not (letter.isascii() and letter.isalpha()):
                raise self.fail("'\\c' without a letter")
            self.at += 1
            return ord(letter) % 32
        if char == "x":
            return self._hex(2)
        if char == "u":
            return self._unicode()
        if char.isascii() and char.isalnum():
            raise self.fail(f"unknown escape '\\{char}'")
        return ord(char)  # an escaped punctuation character (or any other) is itself

    def _hex(self, digits: int) -> int:
        text = self.pattern[self.at : self.at + digits]
        if len(text) != digits or not _HEX.issuperset(text):
            raise self.fail("a hex escape needs hex digits")
        self.at += digits
        return int(text, 16)

    def _unicode(self) -> int:
        if self.peek("{"):
            end = self.pattern.find("}", self.at)
            text = self.pattern[self.at + 1 : end] if end > 0 else ""
            if not text or len(text) > 8 or not _HEX.issuperset(text) or int(text, 16) > _MAX_CODE:
                raise self.fail("a \\u{…} escape needs a code point")
            self.at = end + 1
            return int(text, 16)
        code = self._hex(4)
        # \uD83D\uDE00 is one character in u mode: a surrogate pair.
        if 0xD800 <= code <= 0xDBFF and self.peek("\\u"):
            low = self.pattern[self.at + 2 : self.at + 6]
            if len(low) == 4 and _HEX.issuperset(low) and 0xDC00 <= int(low, 16) <= 0xDFFF:
                self.at += 6
                return 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)
        return code

    def _set(self) -> None:
        negated = self.peek("^")
        self.at += negated
        ranges: list[tuple[int, int]] = []
        properties: list[str] = []
        while True:
            if self.at >= len(self.pattern):
                raise self.fail("unterminated character set")
            if self.peek("]"):
                self.at += 1
                break
            low = self._set_atom(ranges, properties)
            if low is None:
                continue
            # A range needs a character on both sides; otherwise '-' is a literal.
            if self.peek("-") and not self.peek("-]") and self.at + 1 < len(self.pattern):
                self.at += 1
                high = self._set_atom(ranges, properties)
                if high is None:
                    ranges.append((0x2D, 0x2D))
                elif high < low:
                    raise self.fail("a range out of order in a character set")
                else:
                    ranges.append((low, high))
                    continue
            ranges.append((low, low))
        self.emit_set(tuple(sorted(ranges)), tuple(properties), negated)

    def _set_atom(self, ranges: list[tuple[int, int]], properties: list[str]) -> int | None:
        """One member of a set: a character (returned) or a class (added, None returned)."""
        char = self.pattern[self.at]
        self.at += 1
        if char != "\\":
            return ord(char)
        if self.at >= len(self.pattern):
            raise self.fail("'\\' at the end")
        char = self.pattern[self.at]
        self.at += 1
        if char in _CLASSES:
            ranges.extend(_CLASSES[char])
            return None
        if char in "pP":
            properties.append(self._property(char))
            return None
        if char == "b":
            return 0x08
        if char == "-":
            return 0x2D
        return self._character(char)


def translate(pattern: str) -> Translation:
    """``pattern`` (ECMA-262) for RE2 and for Python's ``re``; raises :class:`EcmaSyntaxError`."""
    return _Parser(pattern).run()
