"""The pure classifier, on address objects: every range under every policy.

Private and metadata addresses appear only here, as ``ipaddress`` objects: never in a URL."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from codemode.net import NetworkPolicy, refusal

POLICIES = [
    NetworkPolicy(),
    NetworkPolicy(allow_loopback=True),
    NetworkPolicy(allow_private=True),
    NetworkPolicy(allow_loopback=True, allow_private=True),
]


def teredo(client: str) -> str:
    """A Teredo address whose client is ``client`` (stored bit-inverted in the last 32 bits)."""
    inverted = ~int(IPv4Address(client)) & 0xFFFFFFFF
    return f"2001:0:4136:e378:8000:63bf:{inverted >> 16:x}:{inverted & 0xFFFF:x}"


ALWAYS: list[tuple[str, str]] = [
    ("169.254.0.1", "link-local"),
    ("169.254.255.254", "link-local"),
    ("169.254.169.254", "metadata"),
    ("169.254.170.2", "metadata"),
    ("100.100.100.200", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("fe80::1", "link-local"),
    ("febf:ffff::1", "link-local"),
    ("fe80::1%eth0", "zone id"),
    ("fec0::1", "site-local"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("ff05::1:3", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("192.0.2.1", "documentation"),
    ("198.51.100.1", "documentation"),
    ("203.0.113.1", "documentation"),
    ("2001:db8::1", "documentation"),
    ("198.18.0.1", "special-purpose"),
    ("100::1", "discard"),
    # wrapped forms of always-refused IPv4
    ("::ffff:169.254.169.254", "metadata"),
    ("::169.254.169.254", "metadata"),
    ("64:ff9b::169.254.169.254", "metadata"),
    ("64:ff9b:1::a9fe:a9fe", "metadata"),
    ("2002:a9fe:a9fe::", "metadata"),
    (teredo("169.254.169.254"), "metadata"),
    ("::ffff:169.254.1.1", "link-local"),
    ("2002:a9fe:101::", "link-local"),
    ("::ffff:0.0.0.0", "unspecified"),
    ("64:ff9b::e000:1", "multicast"),
    (teredo("255.255.255.255"), "broadcast"),
]

PRIVATE: list[str] = [
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "100.64.0.1",
    "100.127.255.254",
    "fc00::1",
    "fd12:3456:789a::1",
    "::ffff:10.0.0.1",
    "::ffff:192.168.1.1",
    "::172.16.0.1",
    "::ffff:0:10.0.0.1",
    "64:ff9b::10.1.2.3",
    "64:ff9b:1::a00:1",
    "2002:c0a8:101::1",
    teredo("10.0.0.1"),
    teredo("100.64.0.1"),
]

LOOPBACK: list[str] = [
    "127.0.0.1",
    "127.255.255.254",
    "::1",
    "::ffff:127.0.0.1",
    "::127.0.0.1",
    "64:ff9b::7f00:1",
    "64:ff9b:1::7f00:1",
    "2002:7f00:1::",
    teredo("127.0.0.1"),
]

PUBLIC: list[str] = [
    "93.184.215.14",
    "1.1.1.1",
    "2606:4700:4700::1111",
    "::ffff:1.1.1.1",
    "64:ff9b::1.1.1.1",
    "2002:101:101::",
    teredo("1.1.1.1"),
]


@pytest.mark.parametrize(("text", "reason"), ALWAYS)
@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_always_refused_whatever_the_policy(text: str, reason: str, policy: NetworkPolicy) -> None:
    found = refusal(ip_address(text), policy)
    assert found is not None
    assert reason in found


@pytest.mark.parametrize(
    ("text", "allowed_by", "words"),
    [(text, "allow_private", ("private network", "allow_private_network = true")) for text in PRIVATE]
    + [(text, "allow_loopback", ("loopback", "allow_loopback = true")) for text in LOOPBACK],
)
@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_private_and_loopback_only_when_their_setting_allows(
    text: str, allowed_by: str, words: tuple[str, str], policy: NetworkPolicy
) -> None:
    found = refusal(ip_address(text), policy)
    if getattr(policy, allowed_by):
        assert found is None
    else:
        assert found is not None
        assert all(word in found for word in words), found


@pytest.mark.parametrize("text", PUBLIC)
@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_public_addresses_pass(text: str, policy: NetworkPolicy) -> None:
    assert refusal(ip_address(text), policy) is None


def test_a_wrapped_refusal_names_the_inner_address() -> None:
    found = refusal(IPv6Address("64:ff9b::7f00:1"), NetworkPolicy())
    assert found is not None
    assert "127.0.0.1" in found
    assert "NAT64" in found


def test_teredo_helper_matches_the_standard_library() -> None:
    assert IPv6Address(teredo("10.0.0.1")).teredo == (IPv4Address("65.54.227.120"), IPv4Address("10.0.0.1"))


def test_local_nat64_is_judged_in_both_layouts() -> None:
    # /96 layout (last 32 bits) and RFC 6052 /48 layout (bits 48-63 and 72-87) of 127.0.0.1.
    for text in ("64:ff9b:1::7f00:1", "64:ff9b:1:7f00:0:100::"):
        found = refusal(IPv6Address(text), NetworkPolicy())
        assert found is not None
        assert "127.0.0.1" in found
    assert refusal(IPv6Address("64:ff9b:1::"), NetworkPolicy(allow_loopback=True, allow_private=True))
