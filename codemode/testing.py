"""Test doubles for code that builds on codemode: a broker with no servers, and servers in memory.

For unit tests only. Nothing here is selectable from ``codemode.toml``; the real path (stdio and
HTTP servers, a real sandbox, a ledger file) is what the integration tests and users run.

* :class:`FakeTools` - tools held in memory, each a Python function. It is the broker's
  ``ToolBackend`` and ``CatalogView`` at once, and records every call that reached it, so a test
  can tell what the gates let through.
* :func:`approved_pins` - a lock in which every tool of the given catalogs is approved.
* :func:`memory_ledger` - a SQLite ledger in memory, with the same rules as a file.
* :class:`FakeClock` - a wall clock that moves only when told, for the ledger, the broker and
  :class:`~codemode.CodeMode` (``clock=``): approvals, runs and leases expire without sleeping.
* :func:`fake_broker` - a :class:`~codemode.broker.Broker` wired to the above, and
  :func:`open_test_run` to open a run on it.
* :func:`in_memory_transports` - for :class:`~codemode.CodeMode` and :class:`~codemode.host.McpHost`
  (``transports=``): connect a configured server name to an SDK ``MCPServer`` in this process,
  instead of starting a process or opening a socket.
* :func:`in_process_sandbox` - for :class:`~codemode.CodeMode` (``sandbox_backend=``) and
  :class:`~codemode.sandbox.SandboxManager` (``backend=``): programs run in a thread of the test
  process, speaking the real channel protocol to the real host side, so ``CodeMode.run`` needs
  no Docker and starts no process. NO ISOLATION: a program can do anything the test process can.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, cast

import mcp_types
from mcp.server.mcpserver import MCPServer

from codemode.broker import Approver, Broker, RunLimits, RunState
from codemode.calls import PLAIN_CALL, RunBinding, SendOptions
from codemode.catalog import LockFile, ServerCatalog, ToolSpec, approve, observe, tool_hash
from codemode.config import PolicyConfig
from codemode.engine import LedgerApprovals
from codemode.errors import ServerUnavailableError
from codemode.host import TransportFactory
from codemode.ledger import Clock, Ledger, open_ledger, system_clock
from codemode.sandbox import BackendFactory, InProcessBackend

__all__ = [
    "FakeCall",
    "FakeClock",
    "FakeTools",
    "ToolFailure",
    "approved_pins",
    "fake_broker",
    "in_memory_transports",
    "in_process_sandbox",
    "memory_ledger",
    "open_test_run",
]

Handler = Callable[[dict[str, Any]], Any]
"""A fake tool: takes the arguments; returns structured content (dict/list), text, or a result."""


class ToolFailure(Exception):
    """Raise from a fake tool to answer ``isError: true`` with this message."""


@dataclass(frozen=True)
class FakeCall:
    server: str
    tool: str
    arguments: dict[str, Any]


@dataclass
class _FakeTool:
    spec: ToolSpec
    handler: Handler


@dataclass
class FakeTools:
    """Tools of one or more servers, in memory. ``calls`` lists what reached a tool."""

    trusted: frozenset[str] = frozenset()
    calls: list[FakeCall] = field(default_factory=lambda: [])
    _tools: dict[tuple[str, str], _FakeTool] = field(default_factory=lambda: {})

    def add(
        self,
        server: str,
        name: str,
        handler: Handler,
        *,
        input_schema: Mapping[str, Any] | None = None,
        annotations: Mapping[str, Any] | None = None,
        description: str = "",
    ) -> ToolSpec:
        schema = dict(input_schema or {"type": "object"})
        hints = dict(annotations) if annotations is not None else None
        digest = tool_hash(
            name=name,
            title=None,
            description=description,
            input_schema=schema,
            output_schema=None,
            annotations=hints,
        )
        spec = ToolSpec(
            server=server,
            name=name,
            description=description,
            input_schema=schema,
            annotations=hints,
            schema_hash=digest,
        )
        self._tools[(server, name)] = _FakeTool(spec, handler)
        return spec

    def catalogs(self) -> list[ServerCatalog]:
        servers = sorted({server for server, _ in self._tools})
        return [
            ServerCatalog(server=s, tools=tuple(t.spec for (srv, _), t in self._tools.items() if srv == s))
            for s in servers
        ]

    # -- CatalogView ---------------------------------------------------------------------------

    def live_tool(self, server: str, tool: str) -> ToolSpec | None:
        found = self._tools.get((server, tool))
        return found.spec if found else None

    async def settle(self, server: str) -> None:
        return None

    def is_trusted(self, server: str) -> bool:
        return server in self.trusted

    def server_version(self, server: str) -> str | None:
        return "fake-1.0"

    # -- ToolBackend ---------------------------------------------------------------------------

    async def call_tool(
        self, server: str, tool: str, arguments: dict[str, Any], options: SendOptions = PLAIN_CALL
    ) -> mcp_types.CallToolResult:
        """A fake tool answers at once; it never asks for input nor reports progress."""
        found = self._tools.get((server, tool))
        if found is None:
            raise ServerUnavailableError(server, "fake", f"no tool {tool!r} in the fake server")
        self.calls.append(FakeCall(server, tool, dict(arguments)))
        try:
            value = found.handler(dict(arguments))
        except ToolFailure as failure:
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=str(failure))], is_error=True
            )
        return _as_result(value)

    def long_running(self, server: str, tool: str) -> bool:
        return False

    async def read_resource(self, server: str, uri: str) -> mcp_types.ReadResourceResult:
        raise ServerUnavailableError(server, "fake", "the fake server has no resources")

    async def get_prompt(
        self, server: str, name: str, arguments: dict[str, str]
    ) -> mcp_types.GetPromptResult:
        raise ServerUnavailableError(server, "fake", "the fake server has no prompts")


def _as_result(value: object) -> mcp_types.CallToolResult:
    if isinstance(value, mcp_types.CallToolResult):
        return value
    if isinstance(value, str):
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=value)])
    text = json.dumps(value)
    structured: dict[str, Any] = cast(dict[str, Any], value) if isinstance(value, dict) else {"result": value}
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)], structured_content=structured
    )


@dataclass(frozen=True)
class _Pins:
    lock: LockFile

    def reload_if_changed(self) -> bool:
        return False  # no file behind it


def approved_pins(catalogs: Iterable[ServerCatalog]) -> _Pins:
    """A lock in which every tool of ``catalogs`` is recorded and approved."""
    lock = LockFile()
    for catalog in catalogs:
        lock, _ = observe(lock, catalog)
    if lock.servers:
        lock, _ = approve(lock)
    return _Pins(lock)


class FakeClock:
    """A wall clock (:data:`codemode.ledger.Clock`) that stands still until :meth:`advance` moves it.

    Give the same one to the ledger, the broker (or :class:`~codemode.CodeMode`) and a
    :class:`~codemode.broker.TerminalApprover`, and they agree on what time it is. It starts at
    ``start`` (default: the real time now, so records stamped with the real time elsewhere stay
    in order). NOT REAL TIME: only what takes this clock follows it; the sandbox's wall-time
    limit, server call timeouts and the ledger's waits for a call in flight still take real time.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start, e.g. datetime(2026, 1, 1, tzinfo=UTC)")
        self.now = start if start is not None else datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def memory_ledger(*, store_arguments: bool = True, clock: Clock | None = None) -> Ledger:
    """A ledger in memory: the real rules (state machine, idempotency, hash chain) and no file."""
    return open_ledger(":memory:", store_arguments=store_arguments, clock=clock)


def fake_broker(
    tools: FakeTools,
    *,
    policy: PolicyConfig | Mapping[str, Any] | None = None,
    approver: Approver | None = None,
    ledger: Ledger | None = None,
    clock: Clock = system_clock,
) -> Broker:
    """A broker over ``tools`` (all approved in the lock) and a memory ledger, with every gate.

    ``clock`` is the broker's, and the memory ledger's when none is given."""
    if not isinstance(policy, PolicyConfig):
        policy = PolicyConfig.model_validate(dict(policy or {}))
    ledger = ledger if ledger is not None else memory_ledger(clock=clock)
    return Broker(
        policy=policy,
        catalog=tools,
        pins=approved_pins(tools.catalogs()),
        backend=tools,
        ledger=ledger,
        approvals=LedgerApprovals(ledger),
        approver=approver,
        clock=clock,
    )


def open_test_run(
    broker: Broker,
    *,
    principal: str = "local",
    tenant: str = "default",
    approver: Approver | None = None,
    limits: RunLimits | None = None,
    idempotency_scope: str | None = None,
) -> tuple[RunBinding, RunState]:
    """Open a run on ``broker`` as the host would (a fresh run id); returns its binding and state."""
    binding = RunBinding(
        run_id=f"run_{uuid.uuid4().hex[:12]}",
        principal=principal,
        tenant=tenant,
        trace_id=uuid.uuid4().hex,
        idempotency_scope=idempotency_scope,
    )
    return binding, broker.open_run(binding, approver=approver, limits=limits)


def in_memory_transports(servers: Mapping[str, MCPServer]) -> dict[str, TransportFactory]:
    """``transports=`` for :class:`~codemode.CodeMode` or the host: server name → in-process server.

    The server's entry in ``codemode.toml`` still gives its trust, timeouts and name; only the
    transport is replaced (its ``command`` is never run).
    """
    return {name: partial(_same, server) for name, server in servers.items()}


def _same(server: MCPServer) -> MCPServer:
    return server


def in_process_sandbox() -> BackendFactory:
    """``sandbox_backend=`` for :class:`~codemode.CodeMode`: run programs in this process.

    THIS IS NO SANDBOX: each program runs in a thread of the test process with all of its rights,
    and no memory, CPU or process limit applies (a wall-time limit still ends the run; the
    program's thread is then abandoned). What is real: the in-sandbox runtime's program execution
    (``servers`` imports, stub calls, ``result``, ``parallel``, tracebacks), the channel (a Unix
    socket, the hello with its one-time secret, framing and validation) and everything behind it
    (broker, gates, ledger). Captured output is what the program writes through ``sys.stdout`` /
    ``sys.stderr``; ``os.write(1, …)`` and child processes are not captured.
    """
    return InProcessBackend
