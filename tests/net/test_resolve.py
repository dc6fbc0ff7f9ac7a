"""resolve_checked: every address of the record set is judged, and all are returned in order."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest

from codemode.errors import UnsafeURLError
from codemode.net import NetworkPolicy, SystemResolver, check_url, resolve_checked
from tests.net._fakes import PUBLIC_V4, PUBLIC_V6, FakeResolver


@pytest.mark.anyio
async def test_a_public_record_set_is_returned_whole_in_order() -> None:
    resolver = FakeResolver({"mcp.example.com": [[PUBLIC_V6, PUBLIC_V4]]})
    target = check_url("https://mcp.example.com/mcp", NetworkPolicy())
    addresses = await resolve_checked(target, NetworkPolicy(), resolver)
    assert [str(a) for a in addresses] == [PUBLIC_V6, PUBLIC_V4]
    assert resolver.calls == [("mcp.example.com", 443)]


@pytest.mark.anyio
@pytest.mark.parametrize("bad", ["127.0.0.1", "::1", "::ffff:127.0.0.1", "0.0.0.0", "fe80::1"])
async def test_one_refused_address_refuses_the_whole_record_set(bad: str) -> None:
    resolver = FakeResolver({"mixed.example.com": [[PUBLIC_V4, bad]]})
    target = check_url("https://mixed.example.com/", NetworkPolicy())
    with pytest.raises(UnsafeURLError, match=r"mixed\.example\.com resolves to"):
        await resolve_checked(target, NetworkPolicy(), resolver)


@pytest.mark.anyio
async def test_an_empty_answer_is_refused() -> None:
    resolver = FakeResolver({"empty.example.com": [[]]})
    target = check_url("https://empty.example.com/", NetworkPolicy())
    with pytest.raises(UnsafeURLError, match="no address"):
        await resolve_checked(target, NetworkPolicy(), resolver)


@pytest.mark.anyio
async def test_a_loopback_name_must_resolve_to_loopback_for_plain_http() -> None:
    policy = NetworkPolicy(allow_loopback=True)
    target = check_url("http://localhost:9/", policy)
    assert await resolve_checked(target, policy, FakeResolver({"localhost": [["127.0.0.1"]]})) == (
        IPv4Address("127.0.0.1"),
    )
    with pytest.raises(UnsafeURLError, match="plain http"):
        await resolve_checked(target, policy, FakeResolver({"localhost": [[PUBLIC_V4]]}))


@pytest.mark.anyio
async def test_a_literal_is_not_resolved() -> None:
    resolver = FakeResolver({})
    policy = NetworkPolicy(allow_loopback=True)
    target = check_url("http://127.1:9/", policy)
    assert await resolve_checked(target, policy, resolver) == (IPv4Address("127.0.0.1"),)
    assert resolver.calls == []


@pytest.mark.anyio
async def test_the_system_resolver_reads_numeric_hosts_without_dns() -> None:
    assert await SystemResolver().resolve("127.0.0.1", 9) == [IPv4Address("127.0.0.1")]
