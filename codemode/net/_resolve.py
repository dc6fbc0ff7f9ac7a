"""Resolving a checked name and judging every address it returns.

An attacker who controls a DNS name controls its whole record set, and the client may connect
to any member of it; so one refused address refuses the name. The address returned is the one
to connect to: the caller pins it rather than letting the HTTP stack resolve again (a second
lookup could answer differently: DNS rebinding).
"""

from __future__ import annotations

import socket
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Protocol

import anyio

from codemode.errors import UnsafeURLError
from codemode.net._policy import NetworkPolicy, is_loopback, refusal
from codemode.net._url import Target

__all__ = ["Resolver", "SystemResolver", "resolve_checked"]


class Resolver(Protocol):
    """Turns a host name into addresses. A seam so tests never touch real DNS."""

    async def resolve(self, host: str, port: int) -> list[IPv4Address | IPv6Address]: ...


class SystemResolver:
    """The system resolver (``getaddrinfo``, TCP), in a worker thread via anyio. Raises
    :class:`OSError` when the name does not resolve."""

    async def resolve(self, host: str, port: int) -> list[IPv4Address | IPv6Address]:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        found: list[IPv4Address | IPv6Address] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            text = str(sockaddr[0])
            if len(sockaddr) == 4 and sockaddr[3] and "%" not in text:
                text = f"{text}%{sockaddr[3]}"  # keep the zone: it is refused, never dropped
            address = ip_address(text)
            if address not in found:
                found.append(address)
        return found


async def resolve_checked(
    target: Target, policy: NetworkPolicy, resolver: Resolver
) -> tuple[IPv4Address | IPv6Address, ...]:
    """The addresses ``target`` (from :func:`check_url`) may be reached at, in the resolver's order.

    Every resolved address must pass :func:`refusal` (and be loopback for plain http), or the
    name is refused with :class:`UnsafeURLError`; so is a name with no address. All are returned,
    not just the first: ``localhost`` commonly resolves to ``::1`` before ``127.0.0.1``, and a
    server listening on one of them only must still be reached, as any HTTP client would."""
    if target.address is not None:
        reason = refusal(target.address, policy)
        if reason is not None:
            raise UnsafeURLError(target.origin, reason)
        return (target.address,)
    addresses = await resolver.resolve(target.host, target.port)
    if not addresses:
        raise UnsafeURLError(target.origin, f"{target.host} resolves to no address")
    for address in addresses:
        reason = refusal(address, policy)
        if reason is None and target.scheme == "http" and not is_loopback(address):
            reason = "plain http is refused off loopback: use https"
        if reason is not None:
            raise UnsafeURLError(target.origin, f"{target.host} resolves to {address}: {reason}")
    return tuple(addresses)
