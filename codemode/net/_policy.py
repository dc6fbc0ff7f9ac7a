"""What codemode may reach on its own, and the pure classifier that decides it.

Codemode fetches URLs it was given by configuration or by a remote server (MCP server URLs,
OAuth metadata, every redirect hop). Any of them may point back inside the network codemode runs
in: at a loopback admin port, a private service, or a cloud metadata endpoint that hands out
credentials. :func:`refusal` judges one address against a :class:`NetworkPolicy`; it does no I/O
so every range can be tested on ``ipaddress`` objects alone.

IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo) are unwrapped and
judged as the IPv4 address they reach: ``[::ffff:127.0.0.1]`` is loopback, whatever its spelling.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

__all__ = ["NetworkPolicy", "is_loopback", "is_loopback_name", "name_refusal", "refusal"]

Address = IPv4Address | IPv6Address

LOOPBACK_REASON = "loopback address (set allow_loopback = true in [servers.NAME] to allow it)"
PRIVATE_REASON = "private network address (set allow_private_network = true in [servers.NAME] to allow it)"
METADATA_REASON = "cloud metadata endpoint (never reachable: it hands out the machine's credentials)"


@dataclass(frozen=True)
class NetworkPolicy:
    """Which internal destinations one server may use. Both default to off: a URL from a config
    file or a redirect must not reach this machine or its network unless someone said so."""

    allow_loopback: bool = False
    allow_private: bool = False


def _v4(*cidrs: str) -> tuple[IPv4Network, ...]:
    return tuple(IPv4Network(c) for c in cidrs)


def _v6(*cidrs: str) -> tuple[IPv6Network, ...]:
    return tuple(IPv6Network(c) for c in cidrs)


_V4_METADATA = frozenset(IPv4Address(a) for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200"))
_V6_METADATA = frozenset({IPv6Address("fd00:ec2::254")})
_V4_LOOPBACK = IPv4Network("127.0.0.0/8")
_V4_PRIVATE = _v4("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
_V6_PRIVATE = _v6("fc00::/7")

# Refused whatever the policy; checked in order (broadcast sits inside 240/4).
_V4_ALWAYS: tuple[tuple[tuple[IPv4Network, ...], str], ...] = (
    (_v4("0.0.0.0/8"), "unspecified address"),
    (_v4("169.254.0.0/16"), "link-local address"),
    (_v4("224.0.0.0/4"), "multicast address"),
    (_v4("255.255.255.255/32"), "broadcast address"),
    (_v4("240.0.0.0/4"), "reserved address"),
    (_v4("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"), "documentation address"),
    (_v4("192.0.0.0/24", "192.88.99.0/24", "198.18.0.0/15"), "special-purpose address"),
)
_V6_ALWAYS: tuple[tuple[tuple[IPv6Network, ...], str], ...] = (
    (_v6("ff00::/8"), "multicast address"),
    (_v6("fe80::/10"), "link-local address"),
    (_v6("fec0::/10"), "site-local address (deprecated, never routable)"),
    (_v6("2001:db8::/32", "3fff::/20"), "documentation address"),
    (_v6("100::/64"), "discard-only address"),
)

_MAPPED = IPv6Network("::ffff:0:0/96")
_TRANSLATED = IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE = IPv6Network("::/96")
_NAT64 = IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = IPv6Network("64:ff9b:1::/48")
_SIXTOFOUR = IPv6Network("2002::/16")
_TEREDO = IPv6Network("2001::/32")
_THIS_NETWORK = IPv4Network("0.0.0.0/8")

_METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "instance-data", "metadata.azure.internal"}
)
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def refusal(address: Address, policy: NetworkPolicy) -> str | None:
    """Why codemode must not connect to ``address`` under ``policy``; ``None`` when it may."""
    if isinstance(address, IPv4Address):
        return _refusal_v4(address, policy)
    return _refusal_v6(address, policy)


def _refusal_v4(address: IPv4Address, policy: NetworkPolicy) -> str | None:
    if address in _V4_METADATA:
        return METADATA_REASON
    for networks, reason in _V4_ALWAYS:
        if any(address in n for n in networks):
            return reason
    if address in _V4_LOOPBACK:
        return None if policy.allow_loopback else LOOPBACK_REASON
    if any(address in n for n in _V4_PRIVATE):
        return None if policy.allow_private else PRIVATE_REASON
    if not address.is_global:
        return "special-purpose address (not globally reachable)"
    return None


def _refusal_v6(address: IPv6Address, policy: NetworkPolicy) -> str | None:
    if address.scope_id:
        return "IPv6 address with a zone id (it names a local interface)"
    if address == IPv6Address("::"):
        return "unspecified address"
    if address == IPv6Address("::1"):
        return None if policy.allow_loopback else LOOPBACK_REASON
    if address in _V6_METADATA:
        return METADATA_REASON
    wrapped = embedded_ipv4(address)
    if wrapped is not None:
        form, inner = wrapped
        for candidate in inner:
            reason = _refusal_v4(candidate, policy)
            if reason is not None:
                return f"{reason}; IPv4 {candidate} inside an IPv6 {form} address"
        return None
    for networks, reason in _V6_ALWAYS:
        if any(address in n for n in networks):
            return reason
    if any(address in n for n in _V6_PRIVATE):
        return None if policy.allow_private else PRIVATE_REASON
    if address.is_reserved or not address.is_global:
        return "special-purpose IPv6 address (not globally reachable)"
    return None


def embedded_ipv4(address: IPv6Address) -> tuple[str, list[IPv4Address]] | None:
    """The IPv4 address(es) an IPv6 address delivers to, with the name of the wrapping.

    The local-use NAT64 prefix allows several layouts (RFC 6052 /48 or /96) and the translator's
    is not known here, so both readings are returned and each must pass."""
    value = int(address)
    low = IPv4Address(value & 0xFFFFFFFF)
    if address in _MAPPED:
        return "mapped", [low]
    if address in _TRANSLATED:
        return "translated", [low]
    if address in _COMPATIBLE:
        return "compatible", [low]
    if address in _NAT64:
        return "NAT64", [low]
    if address in _NAT64_LOCAL:
        rfc6052 = IPv4Address((((value >> 64) & 0xFFFF) << 16) | ((value >> 40) & 0xFFFF))
        # The layout not in use leaves zeros where the other one keeps the address; a reading
        # inside 0.0.0.0/8 is that padding (translators never map to it), unless both are.
        readings = [a for a in (low, rfc6052) if a not in _THIS_NETWORK]
        return "local NAT64", readings or [low]
    if address in _SIXTOFOUR:
        return "6to4", [IPv4Address((value >> 80) & 0xFFFFFFFF)]
    if address in _TEREDO:
        return "Teredo", [IPv4Address(~value & 0xFFFFFFFF)]
    return None


def is_loopback(address: Address) -> bool:
    """Whether traffic to ``address`` stays on this machine, so plain http cannot be read on the
    wire. NAT64 and tunnel forms leave the host first, so they do not count."""
    if isinstance(address, IPv4Address):
        return address in _V4_LOOPBACK
    if address.scope_id:
        return False
    mapped = address.ipv4_mapped
    return address == IPv6Address("::1") or (mapped is not None and mapped in _V4_LOOPBACK)


def is_loopback_name(name: str) -> bool:
    """Whether a normalised host name (lower case, no trailing dot) means this machine (RFC 6761)."""
    return name in _LOOPBACK_NAMES or name.endswith(".localhost")


def name_refusal(name: str, policy: NetworkPolicy) -> str | None:
    """Why a normalised DNS name is refused before any lookup; ``None`` when it may be resolved."""
    if name in _METADATA_NAMES:
        return METADATA_REASON
    if is_loopback_name(name) and not policy.allow_loopback:
        return f"{name!r} names this machine: {LOOPBACK_REASON}"
    return None
