"""The commented starter ``codemode.toml`` written by ``codemode init``."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from codemode._resources import resource_dir
from codemode.config import _toml

ServerEntry = Mapping[str, "str | bool | float | int | Sequence[str] | Mapping[str, str]"]

DEMO_SERVER_NAMES = ("docs", "crm", "tickets")


def demo_servers() -> dict[str, ServerEntry]:
    """The bundled example servers, run with this Python over stdio (``codemode init --demo``,
    ``codemode demo`` and the benchmark all configure these)."""
    directory = resource_dir("example_servers")
    return {
        name: {"command": sys.executable, "args": [str(directory / f"{name}_server.py")], "trusted": True}
        for name in DEMO_SERVER_NAMES
    }


_HEADER = """\
# codemode configuration. Reference: README.md ("Configuration").
#
# Each [servers.<name>] table is one MCP server. <name> is the server's identity inside
# codemode (stubs live under servers/<name>/); the server's own serverInfo is never trusted.
#
#   stdio:  command = "...", args = [...], env = { KEY = "${ENV_VAR}" }, cwd = "..."
#           max_message_bytes = 16777216   # read at most this much of one message
#   HTTP:   url = "https://mcp.example.com/mcp", headers = { Authorization = "Bearer ${TOKEN}" }
#           oauth = {}               # sign in with OAuth 2.1 instead: `codemode auth login <name>`
#           allow_loopback = true    # a server on this machine (127.0.0.1; plain http only there)
#   both:   trusted = false          # trust all of the server's readOnlyHint and other annotations
#                                    # (or accept them per tool: `codemode pin --accept-hints`)
#           protocol = "auto"        # auto | legacy (2025-11-25 handshake) | 2026-07-28
#           connect_timeout = 30     # seconds to start, negotiate and list the tools
#           call_timeout = 60        # seconds per call, resource read or prompt
#           max_concurrent_calls = 4 # requests in flight to it at once (default: no limit)
#
# Secrets are never written here: use ${ENV_VAR} references, resolved on this machine only
# when codemode connects. After adding or changing servers run `codemode sync`, review the
# tools it lists and approve them with `codemode pin --approve` (`--accept-hints` also rates
# each tool by its own hints, so a read-only tool's calls need no approval).
"""

_EXAMPLE_SERVERS = """\
# [servers.time]
# command = "uvx"
# args = ["mcp-server-time"]
#
# [servers.tickets]
# url = "http://127.0.0.1:8000/mcp"
# allow_loopback = true
# headers = { Authorization = "Bearer ${TICKETS_TOKEN}" }
#
# [servers.tracker]                 # a remote server behind OAuth
# url = "https://mcp.tracker.example/mcp"
# oauth = {}
"""

_SECTIONS = """\
[sandbox]
# backend = "auto"          # auto | docker | bwrap | process (auto: the first that works, in that order)
# image = "codemode-sandbox:latest"
# memory_mb = 512
# cpus = 1.0
# pids = 64
# wall_time_s = 60
# output_bytes = 65536      # cap on captured stdout and stderr, each
# result_bytes = 65536      # cap on the final result returned to the model
# tmpfs_mb = 64
# nofile = 256
# pool_size = 2             # warm sandboxes kept ready

[policy]
# default_principal = "local"
# default_tenant = "default"

[ledger]
# path = "codemode.db"      # SQLite operation ledger, relative to this file
# url = "postgresql://codemode:${LEDGER_PASSWORD}@db.example/codemode"   # a shared ledger instead

[pins]
# lock_file = "codemode.lock"
"""


def no_servers_hint(config_file: str, *, command_flags: str = "") -> str:
    """What to do when ``config_file`` configures no server: add a table, or import the servers
    another MCP host already has. ``command_flags`` (``--config PATH``) go on the command shown."""
    flags = f" {command_flags}" if command_flags else ""
    return (
        f"add a [servers.<name>] table to {config_file}, for example\n"
        "    [servers.time]\n"
        '    command = "uvx"\n'
        '    args = ["mcp-server-time"]\n'
        "or import the servers of Claude Desktop, Cursor or VS Code (this replaces the file):\n"
        f"    codemode init --force --from claude_desktop_config.json{flags}\n"
        f"then run 'codemode sync{flags}'"
    )


def render_server(name: str, entry: ServerEntry, comment: str | None = None) -> str:
    lines: list[str] = []
    if comment:
        lines += [f"# {line}" for line in comment.splitlines()]
    lines.append(f"[servers.{_toml.key(name)}]")
    lines += [f"{_toml.key(k)} = {_toml.value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


def starter_config(
    servers: Mapping[str, ServerEntry] | None = None, comments: Mapping[str, str] | None = None
) -> str:
    """Return the text of a starter config, with ``servers`` filled in (or commented examples)."""
    parts = [_HEADER]
    if servers:
        parts += [render_server(name, entry, (comments or {}).get(name)) for name, entry in servers.items()]
    else:
        parts.append(_EXAMPLE_SERVERS)
    parts.append(_SECTIONS)
    return "\n".join(parts)
