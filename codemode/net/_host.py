"""Reading the host of a URL the way the connecting code will, so no spelling hides an address.

C resolvers (``inet_aton``) and browsers (the WHATWG URL standard) accept IPv4 addresses in
decimal, hex and octal, with one to four parts: ``2130706433``, ``0x7f.1`` and ``0177.0.0.1`` all
reach 127.0.0.1. A guard that only recognises dotted decimal would pass them as "DNS names". So
every host is parsed here first: a host whose last label is a number is an IPv4 address (or is
refused), a bracketed host is IPv6, and only what is neither is treated as a DNS name.

Forms no legitimate server URL needs are refused rather than decoded: percent-encoded hosts,
IPv6 zone ids, and IP addresses spelled with non-ASCII digits.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

import idna

__all__ = ["Host", "HostError", "parse_host"]

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?", re.ASCII)
_DECIMAL = frozenset("0123456789")
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdef")
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


class HostError(ValueError):
    """The host cannot be read safely; the message is the reason shown to the user."""


@dataclass(frozen=True)
class Host:
    """A normalised host: lower-case ASCII, no brackets, no trailing dot; ``address`` set for an
    IP literal (whatever spelling it came in), ``None`` for a DNS name."""

    name: str
    address: IPv4Address | IPv6Address | None


def parse_host(text: str) -> Host:
    """Normalise the host part of a URL authority (brackets included for IPv6)."""
    if not text:
        raise HostError("the URL has no host")
    if text.startswith("["):
        return _parse_bracketed(text)
    if "%" in text:
        raise HostError("percent-encoded host: write the host name plainly")
    if not text.isascii():
        return _parse_unicode(text)
    return _parse_ascii(text.lower())


def _parse_bracketed(text: str) -> Host:
    if not text.endswith("]"):
        raise HostError("malformed IPv6 literal (no closing bracket)")
    inner = text[1:-1]
    if "%" in inner:
        raise HostError("IPv6 address with a zone id (it names a local interface)")
    if not inner.isascii() or not inner:
        raise HostError("malformed IPv6 literal")
    try:
        address = IPv6Address(inner)
    except ValueError:
        raise HostError(f"malformed IPv6 literal [{inner}]") from None
    return Host(address.compressed, address)


def _parse_unicode(text: str) -> Host:
    """An internationalised name. Normalised first (NFKC turns fullwidth digits into ASCII) so an
    IP address in disguise is caught, then encoded exactly as the HTTP client encodes it."""
    folded = unicodedata.normalize("NFKC", text).translate(_DOTS).lower()
    labels = _labels(folded)
    if folded.isascii() and labels is not None and _ends_in_number(labels):
        raise HostError("IP address written with non-ASCII characters: write it in ASCII digits")
    try:
        encoded = idna.encode(text.lower()).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        raise HostError("invalid internationalised host name") from None
    return _parse_ascii(encoded)


def _labels(text: str) -> list[str] | None:
    """The dot-separated labels, one trailing dot dropped (``localhost.`` is ``localhost``);
    ``None`` when a label is empty."""
    if text.endswith("."):
        text = text[:-1]
    labels = text.split(".")
    return None if any(not label for label in labels) else labels


def _ends_in_number(labels: list[str]) -> bool:
    """The WHATWG rule: a host whose last label is numeric is an IPv4 address or nothing."""
    last = labels[-1]
    if last.startswith("0x"):
        return set(last[2:]) <= _HEX
    return set(last) <= _DECIMAL


def _parse_ascii(text: str) -> Host:
    labels = _labels(text)
    if labels is None:
        raise HostError(f"malformed host {text!r} (empty label)")
    if _ends_in_number(labels):
        address = _parse_ipv4(labels)
        return Host(str(address), address)
    name = ".".join(labels)
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise HostError(f"malformed host name {name!r}")
    return Host(name, None)


def _parse_ipv4(parts: list[str]) -> IPv4Address:
    """``inet_aton``: one to four numbers, each decimal, ``0x`` hex or ``0`` octal; the last one
    fills all the bytes the earlier ones left (``127.1`` is 127.0.0.1)."""
    if len(parts) > 4:
        raise HostError("malformed IPv4 address (more than four parts)")
    numbers = [_ipv4_number(part) for part in parts]
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise HostError("malformed IPv4 address (a part is out of range)")
    value = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        value |= number << (8 * (3 - index))
    return IPv4Address(value)


def _ipv4_number(part: str) -> int:
    # int() alone would accept "1_0", " 1" and non-ASCII digits: the characters are checked first.
    if part.startswith("0x"):
        digits, allowed, base = part[2:], _HEX, 16
    elif len(part) > 1 and part.startswith("0"):
        digits, allowed, base = part[1:], _OCTAL, 8
    else:
        digits, allowed, base = part, _DECIMAL, 10
    if not set(digits) <= allowed:
        raise HostError(f"malformed IPv4 address (bad number {part!r})")
    return int(digits, base) if digits else 0
