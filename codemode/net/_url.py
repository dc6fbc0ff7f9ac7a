"""Checking a URL before codemode fetches it on its own: scheme, credentials, host, address.

:func:`check_url` does no I/O. A DNS name passes it when the name itself is acceptable; the
addresses it resolves to are judged later (:func:`codemode.net.resolve_checked`), right before
the connection, so the address judged is the address used.

The URL is read by hand rather than with :mod:`urllib.parse`: parsers disagree on backslashes,
``@`` and stray whitespace, and an SSRF hides in exactly such a disagreement. Anything that two
reasonable parsers could read differently is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from codemode.errors import UnsafeURLError
from codemode.net._host import HostError, parse_host
from codemode.net._policy import NetworkPolicy, is_loopback, is_loopback_name, name_refusal, refusal

__all__ = ["Target", "check_url", "needs_loopback", "parse_url", "redact_url"]

_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*):(.*)", re.ASCII | re.DOTALL)
_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)
_DEFAULT_PORTS = {"https": 443, "http": 80}


@dataclass(frozen=True)
class Target:
    """Where a checked URL leads. ``host`` is normalised (lower-case ASCII, IPv6 without
    brackets, no trailing dot); ``address`` is the IP literal, or ``None`` for a DNS name."""

    scheme: str
    host: str
    port: int
    address: IPv4Address | IPv6Address | None

    @property
    def origin(self) -> str:
        """``scheme://host:port`` with the port always written: two spellings of one origin
        compare equal."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def redact_url(url: str) -> str:
    """``url`` with any userinfo replaced: an error message must not repeat a password."""
    match = _SCHEME.fullmatch(url)
    if match is None or not match.group(2).startswith("//"):
        return url
    rest = match.group(2)[2:]
    if "@" not in rest:
        return url
    # Up to the last "@" anywhere: a password may itself hold "/", "?" or "#", which would end
    # the authority early. A path with an "@" is hidden too; this is only what a message shows.
    return f"{match.group(1)}://***@{rest.rsplit('@', 1)[1]}"


def parse_url(url: str) -> Target:
    """The scheme, host and port of ``url``, read strictly; no policy applied yet.

    Raises :class:`UnsafeURLError` for anything malformed or ambiguous."""

    def refuse(reason: str) -> UnsafeURLError:
        return UnsafeURLError(redact_url(url), reason)

    if "\\" in url:
        raise refuse("backslash in the URL (parsers disagree on what it means)")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise refuse("whitespace or control character in the URL")
    match = _SCHEME.fullmatch(url)
    if match is None:
        raise refuse("not an absolute URL")
    scheme, rest = match.group(1).lower(), match.group(2)
    if scheme not in _DEFAULT_PORTS:
        raise refuse(f"scheme {scheme!r} is not allowed: use https (plain http only to loopback)")
    if not rest.startswith("//"):
        raise refuse("the URL has no host")
    rest = rest[2:]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority = rest[:end]
    if "@" in authority:
        raise refuse(
            "credentials in the URL (user@host) are never sent: "
            "configure them as headers or auth of the server instead"
        )
    host_text, port = _split_authority(authority, scheme, refuse)
    try:
        host = parse_host(host_text)
    except HostError as exc:
        raise refuse(str(exc)) from None
    return Target(scheme, host.name, port, host.address)


def _split_authority(authority: str, scheme: str, refuse: Callable[[str], UnsafeURLError]) -> tuple[str, int]:
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise refuse("malformed IPv6 literal (no closing bracket)")
        host_text, tail = authority[: close + 1], authority[close + 1 :]
        if tail and not tail.startswith(":"):
            raise refuse("malformed authority after the IPv6 literal")
        port_text = tail[1:] if tail else ""
    elif authority.count(":") > 1:
        raise refuse("an IPv6 address must be written in brackets")
    else:
        host_text, _, port_text = authority.partition(":")
    if not port_text:
        return host_text, _DEFAULT_PORTS[scheme]
    if not _PORT.fullmatch(port_text) or not 0 < int(port_text) <= 65535:
        # The port text is not repeated: in a URL with a password holding "#", it is part of it.
        raise refuse("malformed port (after the host, a number from 1 to 65535)")
    return host_text, int(port_text)


def judge(target: Target, policy: NetworkPolicy) -> str | None:
    """Why ``target`` is refused under ``policy`` before any lookup; ``None`` when it passes."""
    if target.address is not None:
        reason = refusal(target.address, policy)
        local = is_loopback(target.address)
    else:
        reason = name_refusal(target.host, policy)
        local = is_loopback_name(target.host)
    if reason is not None:
        return reason
    if target.scheme == "http" and not local:
        return "plain http is refused off loopback (anyone on the path could read or change it): use https"
    return None


def check_url(url: str, policy: NetworkPolicy) -> Target:
    """Check ``url`` for a fetch codemode makes on its own; its :class:`Target` when it passes.

    Raises :class:`UnsafeURLError` with a reason that says what to change. No I/O: a DNS name is
    judged by name here and by address at connection time."""
    target = parse_url(url)
    reason = judge(target, policy)
    if reason is not None:
        raise UnsafeURLError(redact_url(url), reason)
    return target


def needs_loopback(url: str) -> bool:
    """Whether the guard refuses ``url`` only because it is on this machine (``127.0.0.1``,
    ``localhost``): it passes once ``allow_loopback`` is set, and fails without it."""
    try:
        check_url(url, NetworkPolicy(allow_loopback=True))
    except UnsafeURLError:
        return False
    try:
        check_url(url, NetworkPolicy())
    except UnsafeURLError:
        return True
    return False
