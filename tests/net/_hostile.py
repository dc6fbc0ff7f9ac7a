"""URLs codemode must never fetch under the default policy, each with a word of the reason.

Only loopback forms, wrong schemes and public-looking names appear here: the private and
metadata ranges are tested on address objects (test_classify.py), never inside a URL."""

from __future__ import annotations

LOOPBACK = "loopback"
SCHEME = "is not allowed"
CREDENTIALS = "credentials"
PLAIN_HTTP = "plain http"
METADATA = "metadata"

HOSTILE: list[tuple[str, str]] = [
    # IPv4 loopback in every inet_aton spelling
    ("https://127.0.0.1/", LOOPBACK),
    ("https://127.255.255.254:8443/", LOOPBACK),
    ("https://0x7f000001/", LOOPBACK),
    ("https://0X7F000001/", LOOPBACK),
    ("https://2130706433/", LOOPBACK),
    ("https://0177.0.0.1/", LOOPBACK),
    ("https://017700000001/", LOOPBACK),
    ("https://127.1/", LOOPBACK),
    ("https://127.0.1/", LOOPBACK),
    ("https://0x7f.1/", LOOPBACK),
    ("https://127.000.000.001/", LOOPBACK),
    ("https://127.0.0.1./", LOOPBACK),
    # names of this machine
    ("https://localhost/", LOOPBACK),
    ("https://localhost./", LOOPBACK),
    ("https://LocalHost:8443/mcp", LOOPBACK),
    ("https://foo.localhost/", LOOPBACK),
    ("https://foo.localhost./", LOOPBACK),
    ("https://localhost.localdomain/", LOOPBACK),
    # IPv6 loopback, plain and wrapped
    ("https://[::1]/", LOOPBACK),
    ("https://[0:0:0:0:0:0:0:1]:443/", LOOPBACK),
    ("https://[::ffff:127.0.0.1]/", LOOPBACK),
    ("https://[::ffff:7f00:1]/", LOOPBACK),
    ("https://[::127.0.0.1]/", LOOPBACK),
    ("https://[::ffff:0:127.0.0.1]/", LOOPBACK),
    ("https://[64:ff9b::7f00:1]/", LOOPBACK),
    ("https://[64:ff9b::127.0.0.1]/", LOOPBACK),
    ("https://[64:ff9b:1::7f00:1]/", LOOPBACK),
    ("https://[2002:7f00:1::]/", LOOPBACK),
    ("https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", LOOPBACK),
    # unspecified: "this host" on most stacks
    ("https://0.0.0.0/", "unspecified"),
    ("https://0/", "unspecified"),
    ("https://0x0/", "unspecified"),
    ("https://[::]/", "unspecified"),
    ("https://[::ffff:0.0.0.0]/", "unspecified"),
    # encodings that would hide an address
    ("https://１２７.０.０.１/", "non-ASCII"),
    ("https://127。0。0。1/", "non-ASCII"),
    ("https://%31%32%37.0.0.1/", "percent-encoded"),
    ("https://local%68ost/", "percent-encoded"),
    ("https://1.2.3.4.5/", "malformed IPv4"),
    ("https://08.0.0.1/", "malformed IPv4"),
    ("https://a.test\\@127.0.0.1/", "backslash"),
    ("https://127.0.0.1\t/", "control character"),
    ("https://::1/", "brackets"),
    ("https:///etc/passwd", "no host"),
    ("https://", "no host"),
    # credentials in the URL, or a user part that hides the real host
    ("https://good.test@127.0.0.1/", CREDENTIALS),
    ("https://user:secret@mcp.example.com/", CREDENTIALS),
    ("https://mcp.example.com@localhost/", CREDENTIALS),
    # zone ids name a local interface
    ("https://[fe80::1%25lo]/", "zone id"),
    ("https://[::1%25lo]:9/", "zone id"),
    # wrong schemes
    ("file:///etc/passwd", SCHEME),
    ("gopher://127.0.0.1/", SCHEME),
    ("ftp://mcp.example.com/", SCHEME),
    ("ws://mcp.example.com/", SCHEME),
    ("wss://mcp.example.com/", SCHEME),
    ("javascript:alert(1)", SCHEME),
    # plain http off loopback: refused by scheme before any lookup
    ("http://mcp.example.com/mcp", PLAIN_HTTP),
    ("http://api.example.org:8080/", PLAIN_HTTP),
    # metadata names, whatever their case or trailing dot
    ("https://metadata/", METADATA),
    ("https://METADATA.google.internal./", METADATA),
    ("https://instance-data/", METADATA),
    ("https://metadata.azure.internal/computeMetadata", METADATA),
    # ports
    ("https://mcp.example.com:0/", "port"),
    ("https://mcp.example.com:65536/", "port"),
]
