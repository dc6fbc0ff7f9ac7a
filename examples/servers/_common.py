"""Shared plumbing for the example MCP servers (``docs``, ``crm``, ``tickets``).

This module is imported by the server scripts as a plain top-level module (``import _common``):
the scripts are run by path, so their own directory is on ``sys.path``. It holds

* the tool annotations and the ``@tool`` decorator every server uses;
* the command line every server shares (``--transport``, ``--host``, ``--port``, ``--stateless``,
  ``--log-level``) and the code that runs a server over stdio or Streamable HTTP;
* opaque pagination cursors.

Beside it, imported the same way: ``_world`` (the seeded "world" the three servers agree on) and
``_writes`` (the durable write log and fault injection used by ``crm`` and ``tickets``).

Only the standard library, ``mcp`` and ``pydantic`` are used.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import binascii
import contextlib
import inspect
import logging
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ToolAnnotations

SERVER_VERSION = "0.1.0"

log = logging.getLogger("codemode.examples")
_F = TypeVar("_F", bound=Callable[..., Any])

# --------------------------------------------------------------------------------------------
# Tool annotations
# --------------------------------------------------------------------------------------------

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


def tool(
    server: MCPServer, *, annotations: ToolAnnotations, structured_output: bool | None = None
) -> Callable[[_F], _F]:
    """``@server.tool(...)`` with the function's docstring, dedented, as the description."""

    def decorator(fn: _F) -> _F:
        server.add_tool(
            fn,
            description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=annotations,
            structured_output=structured_output,
        )
        return fn

    return decorator


def write_annotations(*, destructive: bool, open_world: bool = False) -> ToolAnnotations:
    """Annotations of a side-effecting tool. Every call is a new, counted write: never idempotent."""
    return ToolAnnotations(
        read_only_hint=False,
        destructive_hint=destructive,
        idempotent_hint=False,
        open_world_hint=open_world,
    )


# --------------------------------------------------------------------------------------------
# Command line and transports
# --------------------------------------------------------------------------------------------


def build_parser(name: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"{name}_server.py", description=description)
    parser.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio (default) or Streamable HTTP",
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="HTTP port, required with --transport http; 0 picks a free port (see the READY line)",
    )
    parser.add_argument(
        "--stateless",
        action="store_true",
        help="HTTP only: no sessions (stateless_http), as a 2026-07-28-style stateless server",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("EXAMPLE_SERVER_LOG_LEVEL", "WARNING"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level for stderr (default WARNING)",
    )
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.transport == "http":
        if args.port is None:
            parser.error("--transport http needs --port (0 picks a free port)")
        if not 0 <= args.port <= 65535:
            parser.error(f"--port must be between 0 and 65535, not {args.port}")
    elif args.stateless:
        parser.error("--stateless applies only to --transport http")


def configure_logging(level: str) -> None:
    """Log to stderr only: on the stdio transport, stdout carries the protocol."""
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def reject_unknown_tools(server: MCPServer) -> None:
    """Answer a call to an unknown tool with JSON-RPC -32602, as both spec revisions require."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.params is not None:
            name = ctx.params.get("name")
            if isinstance(name, str) and name not in {tool.name for tool in await server.list_tools()}:
                raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        return await call_next(ctx)

    server.middleware.append(middleware)


def run(server: MCPServer, args: argparse.Namespace) -> None:
    """Serve ``server`` as the parsed command line says. Returns when the server stops."""
    # SIGTERM exits at once, removing a temporary state dir first (uvicorn restores and re-raises it
    # after its graceful shutdown on HTTP).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if args.transport == "stdio":
        anyio.run(server.run_stdio_async)
    else:
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(_serve_http, server, args.host, args.port, args.stateless, args.log_level)


# Temporary state directories (see ``_writes.WriteLog``), removed at exit and on SIGTERM.
TEMP_DIRS: list[Path] = []


def _remove_temp_dirs() -> None:
    for path in TEMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_remove_temp_dirs)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # Not SystemExit: on stdio a worker thread blocks reading stdin and would keep the process alive.
    _remove_temp_dirs()
    os._exit(128 + signum)


async def _serve_http(server: MCPServer, host: str, port: int, stateless: bool, log_level: str) -> None:
    import uvicorn  # the SDK's HTTP dependency; imported here so stdio servers start faster

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        print(f"error: cannot listen on {host}:{port}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc
    sock.listen(128)
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if family == socket.AF_INET6 else host
    url = f"http://{url_host}:{bound_port}/mcp"

    app = server.streamable_http_app(stateless_http=stateless, host=host)
    config = uvicorn.Config(
        app,
        host=host,
        port=bound_port,
        log_config=None,
        access_log=False,
        log_level=log_level.lower(),
        lifespan="on",
        timeout_graceful_shutdown=1,
    )

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                print(f"READY {url}", file=sys.stderr, flush=True)

    await _Server(config).serve(sockets=[sock])


# --------------------------------------------------------------------------------------------
# Pagination
# --------------------------------------------------------------------------------------------


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int:
    """The offset an opaque cursor stands for (0 for no cursor); ToolError for a malformed one."""
    if cursor is None or cursor == "":
        return 0
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, number = raw.partition(":")
        offset = int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ToolError(f"invalid cursor {cursor!r}: pass the next_cursor of a previous page") from exc
    if prefix != "offset" or offset < 0:
        raise ToolError(f"invalid cursor {cursor!r}: pass the next_cursor of a previous page")
    return offset


def page_cursor(offset: int, limit: int, total: int) -> str | None:
    return encode_cursor(offset + limit) if offset + limit < total else None
