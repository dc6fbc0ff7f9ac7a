"""Outbound HTTP that codemode makes on its own (remote MCP servers, OAuth discovery, redirects)
goes through this guard, so a URL from a config file or a server cannot reach this machine, its
private network or a cloud metadata endpoint unless the configuration allows it.

:func:`check_url` judges a URL without I/O; :func:`resolve_checked` judges every address a name
resolves to; :class:`GuardedTransport` does both for each request and pins the addresses.
"""

from __future__ import annotations

from codemode.net._policy import NetworkPolicy, refusal
from codemode.net._resolve import Resolver, SystemResolver, resolve_checked
from codemode.net._transport import GuardedTransport
from codemode.net._url import Target, check_url, needs_loopback

__all__ = [
    "GuardedTransport",
    "NetworkPolicy",
    "Resolver",
    "SystemResolver",
    "Target",
    "check_url",
    "needs_loopback",
    "refusal",
    "resolve_checked",
]
