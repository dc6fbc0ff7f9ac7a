"""check_url: every hostile spelling is refused with a reason; legitimate URLs pass, normalised."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address

import pytest

from codemode.errors import UnsafeURLError
from codemode.net import NetworkPolicy, Target, check_url, needs_loopback
from tests.net._hostile import HOSTILE

LOOPBACK_OK = NetworkPolicy(allow_loopback=True)


def test_the_hostile_table_is_large_and_distinct() -> None:
    urls = [url for url, _ in HOSTILE]
    assert len(urls) >= 35
    assert len(set(urls)) == len(urls)


@pytest.mark.parametrize(("url", "reason"), HOSTILE)
def test_hostile_urls_are_refused_with_their_reason(url: str, reason: str) -> None:
    with pytest.raises(UnsafeURLError) as caught:
        check_url(url, NetworkPolicy())
    assert reason.lower() in caught.value.reason.lower()
    assert reason.lower() in str(caught.value).lower()


def test_a_refusal_says_how_to_allow_loopback() -> None:
    with pytest.raises(UnsafeURLError, match=r"allow_loopback = true in \[servers\.NAME\]"):
        check_url("https://127.1/", NetworkPolicy())


@pytest.mark.parametrize(
    "url",
    [
        "https://user:hunter2@mcp.example.com/",
        # A password holding "#", "/" or "?" ends the authority early for a parser: the rest of it
        # must not show up as the host, the port or the path.
        "https://user:hun#ter2@mcp.example.com/mcp",
        "https://user:hun/ter2@mcp.example.com/",
        "https://user:hun?ter2@mcp.example.com/",
        "https://user:hunter2:8443@mcp.example.com/",
    ],
)
def test_a_password_in_the_url_is_not_repeated_in_the_error(url: str) -> None:
    with pytest.raises(UnsafeURLError) as caught:
        check_url(url, NetworkPolicy())
    for part in ("hun", "ter2"):
        assert part not in str(caught.value)
        assert part not in caught.value.url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://mcp.example.com/mcp", Target("https", "mcp.example.com", 443, None)),
        ("https://api.example.org:8443/x", Target("https", "api.example.org", 8443, None)),
        ("https://MCP.Example.COM./mcp?x=1#f", Target("https", "mcp.example.com", 443, None)),
        ("HTTPS://mcp.example.com:/", Target("https", "mcp.example.com", 443, None)),
        ("https://Bücher.example/x", Target("https", "xn--bcher-kva.example", 443, None)),
        ("https://例え.テスト/", Target("https", "xn--r8jz45g.xn--zckzah", 443, None)),
        ("https://_acme.example.com/", Target("https", "_acme.example.com", 443, None)),
        ("https://0x7f.example.com/", Target("https", "0x7f.example.com", 443, None)),
        ("https://1.1.1.1/", Target("https", "1.1.1.1", 443, IPv4Address("1.1.1.1"))),
        (
            "https://[2606:4700:4700:0::1111]:8443/",
            Target("https", "2606:4700:4700::1111", 8443, IPv6Address("2606:4700:4700::1111")),
        ),
    ],
)
def test_legitimate_urls_pass_normalised(url: str, expected: Target) -> None:
    assert check_url(url, NetworkPolicy()) == expected


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("http://127.0.0.1:8000/mcp", "127.0.0.1", 8000),
        ("http://localhost:9/", "localhost", 9),
        ("http://[::1]:9/", "::1", 9),
        ("http://LOCALHOST./", "localhost", 80),
        ("http://foo.localhost:9/", "foo.localhost", 9),
        ("https://0x7f.1/", "127.0.0.1", 443),
        ("https://2130706433/", "127.0.0.1", 443),
        ("https://0177.0.0.1/", "127.0.0.1", 443),
        ("http://[::ffff:127.0.0.1]:9/", "::ffff:7f00:1", 9),
    ],
)
def test_loopback_passes_when_allowed(url: str, host: str, port: int) -> None:
    target = check_url(url, LOOPBACK_OK)
    assert (target.host, target.port) == (host, port)


def test_plain_http_to_a_wrapped_loopback_that_leaves_the_host_is_refused() -> None:
    # NAT64 reaches 127.0.0.1 of the translator, across the network: https still required.
    assert check_url("https://[64:ff9b::7f00:1]/", LOOPBACK_OK).port == 443
    with pytest.raises(UnsafeURLError, match="plain http"):
        check_url("http://[64:ff9b::7f00:1]/", LOOPBACK_OK)


@pytest.mark.parametrize(
    "url",
    ["https://[fe80::1%25lo]/", "https://0.0.0.0/", "https://metadata.google.internal/", "ftp://localhost/"],
)
def test_allowing_everything_still_refuses_the_always_refused(url: str) -> None:
    with pytest.raises(UnsafeURLError):
        check_url(url, NetworkPolicy(allow_loopback=True, allow_private=True))


def test_origin_always_writes_the_port_and_brackets_ipv6() -> None:
    assert check_url("https://mcp.example.com/x", NetworkPolicy()).origin == "https://mcp.example.com:443"
    assert check_url("http://[::1]/", LOOPBACK_OK).origin == "http://[::1]:80"


def test_a_port_in_non_ascii_digits_is_refused() -> None:
    # httpx reads it as port 80 (int() accepts any digits); check_url does not guess.
    with pytest.raises(UnsafeURLError, match="port"):
        check_url("https://mcp.example.com:８０/", NetworkPolicy())


@pytest.mark.parametrize(
    ("url", "needed"),
    [
        ("http://127.0.0.1:9000/mcp", True),
        ("http://localhost:9/", True),
        ("https://[::1]/", True),
        ("https://mcp.example.com/mcp", False),  # passes without it
        ("https://10.0.0.1/", False),  # private: allow_loopback does not let it through
        ("https://0.0.0.0/", False),  # always refused
        ("ftp://localhost/", False),
    ],
)
def test_needs_loopback_is_true_only_when_allow_loopback_is_what_is_missing(url: str, needed: bool) -> None:
    assert needs_loopback(url) is needed
