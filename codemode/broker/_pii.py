"""PII tokenisation: personal data becomes stable placeholders the model never sees through.

A tool result such as ``{"email": "ana@example.com"}`` reaches the program as
``{"email": "<pii:email:5d41402abc>"}``. The placeholder is stable within a run (same value,
same placeholder: joins and de-duplication still work) and unguessable (an HMAC under a per-run
key). When the program passes a placeholder to another tool, the broker maps it back to the
real value just before the call, so data can flow from one server to another without ever
being printed to the model. Placeholders the vault did not issue are left alone.

The limit of that: a tool that hands its input back transformed (base64, gzip, a translation,
an echo with a twist) returns the value in a form no detector recognises, and the program reads
it. ``[policy.results] pii_masked_tools`` names such tools; they get the placeholders as the
program passed them (see :func:`arguments_for_tool`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
import threading
from collections.abc import Callable, Iterable
from typing import Any

from codemode.broker._selectors import any_match
from codemode.calls import ToolCallRequest
from codemode.config import ResultPolicy

PLACEHOLDER = re.compile(r"<pii:([a-z]+):([0-9a-f]{12})>")

_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b"
)
# International or national numbers with separators (the country code and a parenthesised area
# code are optional); at least 9 digits and a sign of being a phone number (checked below) keep
# dates, ids and amounts out. After an explicit "+<country code>" and a space or dash, groups may
# be written as countries do ("+33 6 12 34 56 78" starts with one digit, "+44 7911 123456" ends
# with six); without one, such groupings are ISBNs, versions and coordinates far more often.
_PHONE = re.compile(
    r"(?<![\w+(])(?:\+?\d{1,3}[\s.-]?)?(?:\(\d{1,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]\d{2,4}){1,4}(?![\w-])"
    r"|(?<![\w+(])\+\d{1,3}[ -](?:\(\d{1,4}\)[ -]?)?\d{1,4}(?:[ -]\d{2,6}){1,5}(?![\w-])"
)
_CARD = re.compile(r"(?<![\w-])(?:\d[ -]?){12,18}\d(?![\w-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")
_SSN = re.compile(r"(?<!\d)\d{3}-\d{2}-\d{4}(?!\d)")
_PHONE_WORDS = re.compile(r"(?i)\b(?:phone|tel|telephone|mobile|cell|fax|call|sms|whatsapp)\b")
_PHONE_CONTEXT_CHARS = 32
# In a field named like a phone number the name is the context, and a number may come unspaced.
_FIELD_PHONE = re.compile(rf"(?:{_PHONE.pattern})|(?<![\w+(])\+?\d{{9,15}}(?![\w-])")
_PHONE_FIELD_NAME = re.compile(
    r"phone|mobile|fax|msisdn|whatsapp|telefon|(?<![a-z])(?:tel|cell|sms)(?:ular|no|nr|num|number)?(?![a-z])"
)
_CAMEL_HUMP = re.compile(r"(?<=[a-z])(?=[A-Z])")
_PHONE_NAME_HINTS = ("phone", "mobile", "fax", "msisdn", "whatsapp", "tel", "cell", "sms")
"""Every name :func:`is_phone_field` accepts holds one of these: the whole-text scan's stand-in
(substring tests on the lowered text: a case-insensitive pattern of them costs ten times more)."""


def _may_name_a_phone_field(text: str) -> bool:
    lowered = text.lower()
    return any(hint in lowered for hint in _PHONE_NAME_HINTS)


_DATE_LIKE = re.compile(r"^\d{4}[-./]\d{1,2}[-./]\d{1,2}|^\d{1,2}[-./]\d{1,2}[-./]\d{4}")
_NANP = re.compile(r"^\d{3}[\s.-]\d{3}[\s.-]\d{4}$")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card_ok(match: re.Match[str]) -> bool:
    """Card numbers: 13-19 digits, an issuer prefix (2-6), not one repeated digit, Luhn valid.

    Hashes, ids and zero-padded counters pass Luhn one time in ten; the issuer and repeat
    checks keep ``0000000000000000`` and most hex-looking ids out.
    """
    digits = re.sub(r"\D", "", match.group(0))
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and len(set(digits)) > 1 and _luhn_ok(digits)


def _iban_ok(match: re.Match[str]) -> bool:
    compact = match.group(0).replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


def _phone_ok(match: re.Match[str]) -> bool:
    """Phone numbers need a sign of being one: ``+``, an area code in parentheses, the 3-3-4
    grouping, or a word such as "phone" just before. Bare digit runs are ids and amounts."""
    text = match.group(0)
    digits = re.sub(r"\D", "", text)
    if not 9 <= len(digits) <= 15 or _DATE_LIKE.match(text):
        return False
    if text.startswith("+") or "(" in text or _NANP.match(text):
        return True
    before = match.string[max(0, match.start() - _PHONE_CONTEXT_CHARS) : match.start()]
    return bool(_PHONE_WORDS.search(before))


def _field_phone_ok(match: re.Match[str]) -> bool:
    """In a phone field (see :func:`is_phone_field`) the field's name is the sign."""
    text = match.group(0)
    return 9 <= len(re.sub(r"\D", "", text)) <= 15 and not _DATE_LIKE.match(text)


def is_phone_field(name: str) -> bool:
    """Whether a field called ``name`` holds phone numbers (``phone``, ``homeTel``, ``fax_no``...):
    its value needs no context word to be one. Short words count only as whole words, so that
    ``hotel`` or ``cellar`` do not."""
    return _PHONE_FIELD_NAME.search(_CAMEL_HUMP.sub(" ", name).lower()) is not None


_PHONE_NOUNS = frozenset(
    {"phone", "telephone", "mobile", "cellphone", "cell", "tel", "fax", "msisdn", "whatsapp"}
)
_NUMBER_WORDS = frozenset({"number", "no", "nr", "num"})
_WORD = re.compile(r"[a-z0-9]+")


def names_a_phone_number(name: str) -> bool:
    """Whether a field called ``name`` is a phone number itself, by its last word (``mobile``,
    ``homeTel``, ``fax_no``, ``phone_numbers``). Stricter than :func:`is_phone_field`, for bare
    numbers: ``sms_sent_at``, ``phoneNumberId`` and ``cell_count`` hold numbers that are not."""
    words = _WORD.findall(_CAMEL_HUMP.sub(" ", name).lower())
    words = [word.removesuffix("s") if len(word) > 3 else word for word in words[-2:]]  # plurals
    if not words:
        return False
    last = words[-1]
    return last in _PHONE_NOUNS or (last in _NUMBER_WORDS and len(words) == 2 and words[0] in _PHONE_NOUNS)


_Detectors = dict[str, tuple[re.Pattern[str], Callable[[re.Match[str]], bool] | None]]

_DETECTORS: _Detectors = {
    "email": (_EMAIL, None),
    "iban": (_IBAN, _iban_ok),
    "card": (_CARD, _card_ok),
    "ssn": (_SSN, None),
    "phone": (_PHONE, _phone_ok),
}
_FIELD_DETECTORS: _Detectors = {**_DETECTORS, "phone": (_FIELD_PHONE, _field_phone_ok)}
"""For the value of a phone field. It finds whatever :data:`_DETECTORS` finds: ``_PHONE`` is
tried first at each place, and no ``_PHONE`` match can start inside a bare number's (a digit or
``+`` is before it), so the bare alternative only adds matches; the check only drops a condition."""


class PiiVault:
    """Issues placeholders for one run and maps them back."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._values: dict[str, str] = {}
        self._lock = threading.Lock()

    def placeholder(self, kind: str, value: str) -> str:
        digest = hmac.new(self._key, f"{kind}\x00{value}".encode(), hashlib.sha256).hexdigest()[:12]
        token = f"<pii:{kind}:{digest}>"
        with self._lock:
            self._values[token] = value
        return token

    def reveal(self, text: str) -> str:
        """Replace every placeholder this vault issued by its value."""
        if "<pii:" not in text:
            return text
        with self._lock:
            values = dict(self._values)
        return PLACEHOLDER.sub(lambda m: values.get(m.group(0), m.group(0)), text)

    def __len__(self) -> int:
        return len(self._values)


def arguments_for_tool(policy: ResultPolicy, vault: PiiVault, request: ToolCallRequest) -> dict[str, Any]:
    """The arguments a tool is called with: placeholders mapped back to their values, except for
    a tool in ``pii_masked_tools``, which gets them as the program passed them.

    Masked rather than refused: such a tool may well be given text that holds a placeholder (a
    note, a log line), and the placeholder is all the program itself knows; what it cannot do
    is turn the tool into a decoder. The call goes on through every gate as usual.
    """
    arguments = dict(request.arguments)
    if any_match(policy.pii_masked_tools, request.server, request.tool):
        return arguments
    return map_strings(arguments, vault.reveal)


@functools.lru_cache(maxsize=64)
def _any_of(kinds: frozenset[str], phone_field: bool = False) -> re.Pattern[str] | None:
    """One pattern that matches somewhere iff a detector of ``kinds`` does (before its check)."""
    table = _FIELD_DETECTORS if phone_field else _DETECTORS
    sources = [f"(?:{pattern.pattern})" for kind, (pattern, _) in table.items() if kind in kinds]
    return re.compile("|".join(sources)) if sources else None


_JSON_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(.))", re.S)
_JSON_UNESCAPED = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    return chr(int(code, 16)) if code else _JSON_UNESCAPED.get(match.group(2), match.group(2))


def json_scan_text(text: str) -> str:
    """The JSON text of a value (``ensure_ascii=False``) with its escapes decoded, for the
    detectors' whole-value scans.

    On the raw text a newline before a number is the two characters ``\\n``, and the ``n``
    defeats the patterns' boundaries (``"Card:\\n4111..."`` hides the card). Decoded, each string
    stands between quotes exactly as it is: no pattern matches a quote, and a quote is neither a
    word character nor one the patterns' boundaries exclude, so every match in any string (key or
    value) is a match at the same place here, with at least the same context before it.
    """
    if "\\" not in text:
        return text
    try:
        # The codec decodes JSON's escapes (a subset of Python's) in C, four times faster than
        # the pattern below; non-Latin-1 characters go through it as escapes of their own.
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:  # not an encoder's JSON text: decode what JSON defines, and only that
        return _JSON_ESCAPE.sub(_unescape, text)


_NINE_DIGIT_NUMBER = re.compile(r"\d(?:[\s.()-]{0,2}\d){8}")
"""Nine digits with at most two of the detectors' separators between each two: every validated
phone (9-15 digits), card (13-19) or SSN (9) match holds such a run, since their patterns allow at
most a parenthesis and a separator (``1 (415``, ``) 555``) between digits. ISO timestamps, short
amounts and numbers apart in JSON (a quote or a comma between) hold none: they are the usual digits
of small answers."""
_IBAN_HEAD = re.compile(r"[A-Z]{2}\d{2}")
_NEEDS_NINE_DIGITS = frozenset({"phone", "card", "ssn"})


def _could_match(text: str, kinds: frozenset[str]) -> bool:
    """False when no detector of ``kinds`` can find anything in ``text``, from what each needs
    at the least: ``@`` for an e-mail address, a run of nine digits for a phone, card or SSN, a
    country code and check digits for an IBAN. Searches far cheaper than the detectors' own
    pattern (each starts only where its first character can), so most answers skip that pattern."""
    if "email" in kinds and "@" in text:
        return True
    if not kinds.isdisjoint(_NEEDS_NINE_DIGITS) and _NINE_DIGIT_NUMBER.search(text) is not None:
        return True
    return "iban" in kinds and _IBAN_HEAD.search(text) is not None


def pii_kinds_in(text: str, kinds: Iterable[str], *, fields: bool = False) -> set[str]:
    """Which of ``kinds`` occur anywhere in ``text`` (a validated match, not just a pattern hit).

    ``fields``: ``text`` is a value's :func:`json_scan_text`, whose field names may make a string
    a phone number (see :func:`map_fields`). The answer is then every kind that any of its
    strings holds, and perhaps more: only a pre-test for the detectors run on each string.
    """
    wanted = frozenset(kinds)
    return detected_kinds(text, wanted, fields=fields) if _could_match(text, wanted) else set()


def detected_kinds(text: str, kinds: frozenset[str], *, fields: bool = False) -> set[str]:
    """:func:`pii_kinds_in` without the cheap pre-test: every detector's own pattern is run."""
    found: set[str] = set()
    # Where a field name might be a phone field's, any phone-shaped number counts.
    phone_field = fields and "phone" in kinds and _may_name_a_phone_field(text)
    prefilter = _any_of(kinds, phone_field)
    if prefilter is None or not prefilter.search(text):  # one pass finds nothing: most results
        return found
    for kind, (pattern, check) in (_FIELD_DETECTORS if phone_field else _DETECTORS).items():
        if kind not in kinds:
            continue
        for match in pattern.finditer(text):
            value = match.group(0)
            if not PLACEHOLDER.fullmatch(value) and (check is None or check(match)):
                found.add(kind)
                break
    return found


def scrub_text(
    text: str, kinds: Iterable[str], replace: Callable[[str, str], str], *, phone_field: bool = False
) -> tuple[str, int]:
    """Replace each PII match of ``kinds`` by ``replace(kind, value)``; return text and count.

    ``phone_field``: ``text`` is the value of a field named like a phone number's.
    """
    kinds = frozenset(kinds)
    if not _could_match(text, kinds):
        return text, 0
    prefilter = _any_of(kinds, phone_field)
    if prefilter is None or not prefilter.search(text):
        return text, 0
    count = 0
    for kind, (pattern, check) in (_FIELD_DETECTORS if phone_field else _DETECTORS).items():
        if kind not in kinds:
            continue

        def substitute(
            match: re.Match[str], kind: str = kind, check: Callable[[re.Match[str]], bool] | None = check
        ) -> str:
            nonlocal count
            value = match.group(0)
            if PLACEHOLDER.fullmatch(value) or (check is not None and not check(match)):
                return value
            count += 1
            return replace(kind, value)

        text = pattern.sub(substitute, text)
    return text, count


def map_strings(value: Any, transform: Callable[[str], str]) -> Any:
    """Apply ``transform`` to every string inside a JSON value (keys included)."""
    if isinstance(value, str):
        return transform(value)
    if isinstance(value, list):
        return [map_strings(item, transform) for item in value]  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, dict):
        mapped: dict[Any, Any] = {}
        for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
            mapped[transform(key) if isinstance(key, str) else key] = map_strings(item, transform)
        return mapped
    return value


def map_fields(value: Any, transform: Callable[[str, bool], str]) -> Any:
    """:func:`map_strings`, telling ``transform`` whether the string is in a phone field: under a
    key that :func:`is_phone_field` accepts, at any depth (``{"phones": ["06 12 34 56 78"]}``).

    A whole number under a key that :func:`names_a_phone_number` accepts is a phone number
    written without its leading ``0`` or ``+`` (``{"mobile": 33612345678}``, or ``33612345678.0``
    from a JavaScript server): ``transform`` sees its digits, and what it makes of them replaces
    the number only when it changed them (a placeholder, not a number, then)."""
    # Per key: (is_phone_field, names_a_phone_number). Rows repeat their keys; dropped after the
    # call, since keys may be PII.
    names: dict[str, tuple[bool, bool]] = {}

    def visit(item: Any, phone_field: bool, number_field: bool) -> Any:
        if isinstance(item, str):
            return transform(item, phone_field)
        if number_field and (type(item) is int or (type(item) is float and item.is_integer())):
            digits = str(int(item))
            scrubbed = transform(digits, True)
            return item if scrubbed == digits else scrubbed
        if isinstance(item, list):
            return [visit(element, phone_field, number_field) for element in item]  # pyright: ignore[reportUnknownVariableType]
        if not isinstance(item, dict):
            return item
        mapped: dict[Any, Any] = {}
        for key, inner in item.items():  # pyright: ignore[reportUnknownVariableType]
            if not isinstance(key, str):
                mapped[key] = visit(inner, phone_field, False)
                continue
            named = names.get(key)
            if named is None:
                named = names[key] = (is_phone_field(key), names_a_phone_number(key))
            mapped[transform(key, phone_field)] = visit(inner, phone_field or named[0], named[1])
        return mapped

    return visit(value, False, False)
