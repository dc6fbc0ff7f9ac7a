"""Small adapters that let the broker talk to the host and the ledger through its own seams.

The broker depends on Protocols (``CatalogView``, ``ToolBackend``, ``ApprovalStore``); these
classes implement them on the concrete MCP host, configuration and SQLite ledger, so neither
side imports the other's internals.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import mcp_types

from codemode.broker import ApprovalAnswer, ApprovalRequest
from codemode.calls import ProgressListener
from codemode.catalog import ServerCatalog, ToolSpec
from codemode.config import Config
from codemode.errors import CodemodeError
from codemode.host import ConnectionState, InputHandler, McpHost
from codemode.ledger import ApprovalConsumed, ApprovalRecord, Ledger


class HostCatalog:
    """``CatalogView`` over the live host: only tools of connected servers are listed."""

    def __init__(self, host: McpHost, config: Config) -> None:
        self._host = host
        self._config = config
        self._versions: dict[str, tuple[ServerCatalog | None, str | None]] = {}

    def live_tool(self, server: str, tool: str) -> ToolSpec | None:
        connection = self._host.connections.get(server)
        if connection is None or connection.state is not ConnectionState.READY or connection.catalog is None:
            return None
        if connection.relisting:  # announced a change we have not listed yet: fail closed
            return None
        return connection.tool(tool)

    async def settle(self, server: str) -> None:
        connection = self._host.connections.get(server)
        if connection is not None and connection.relisting:
            await connection.wait_relisted(connection.config.call_timeout)

    def is_trusted(self, server: str) -> bool:
        entry = self._config.servers.get(server)
        return bool(entry and entry.trusted)

    def server_version(self, server: str) -> str | None:
        connection = self._host.connections.get(server)
        if connection is None:
            return None
        # Asked on every call: read once per listing (a reconnect or relist brings a new catalog).
        catalog = connection.catalog
        cached = self._versions.get(server)
        if cached is not None and cached[0] is catalog:
            return cached[1]
        info = connection.status().server_info
        found = info.get("version") if info else None
        version = str(found) if found is not None else None
        self._versions[server] = (catalog, version)
        return version


class HostBackend:
    """``ToolBackend`` that sends through the MCP host."""

    def __init__(self, host: McpHost) -> None:
        self._host = host

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        meta: dict[str, Any] | None = None,
        inputs: InputHandler | None = None,
        time_limit_s: float | None = None,
        on_progress: ProgressListener | None = None,
    ) -> mcp_types.CallToolResult:
        return await self._host.call_tool(
            server,
            tool,
            arguments,
            meta=meta,
            inputs=inputs,
            time_limit_s=time_limit_s,
            on_progress=on_progress,
        )

    def long_running(self, server: str, tool: str) -> bool:
        try:
            return self._host.long_running(server, tool)
        except CodemodeError:  # an unknown server: the call itself will say so
            return False

    async def read_resource(self, server: str, uri: str) -> mcp_types.ReadResourceResult:
        return await self._host.connection(server).read_resource(uri)

    async def get_prompt(
        self, server: str, name: str, arguments: dict[str, str]
    ) -> mcp_types.GetPromptResult:
        return await self._host.connection(server).get_prompt(name, arguments)


class LedgerApprovals:
    """``ApprovalStore`` on the ledger: approvals are persisted, hash-chained and single-use."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def consume_preissued(
        self,
        *,
        principal: str,
        tenant: str,
        server: str,
        tool: str,
        args_digest: str,
        call_id: str,
        now: float,
    ) -> str | None:
        moment = datetime.fromtimestamp(now, UTC)
        for approval in self._ledger.find_approvals(
            tenant=tenant,
            principal=principal,
            server=server,
            tool=tool,
            args_digest=args_digest,
            usable_at=moment,
        ):
            used = self._ledger.consume_approval(
                approval.approval_id,
                call_id=call_id,
                tenant=tenant,
                principal=principal,
                server=server,
                tool=tool,
                args_digest=args_digest,
                now=moment,
            )
            if isinstance(used, ApprovalConsumed):
                return approval.approval_id
        return None

    def record_granted(self, request: ApprovalRequest, answer: ApprovalAnswer) -> str:
        now = datetime.now(UTC)
        approval = ApprovalRecord.issue(
            tenant=request.tenant,
            principal=request.principal,
            server=request.server,
            tool=request.tool,
            args_digest=request.args_digest,
            risk=request.risk,
            call_id=request.call_id,
            approver=answer.approver,
            expires_at=datetime.fromtimestamp(request.expires_at, UTC),
            now=now,
        )
        self._ledger.record_approval(approval)
        used = self._ledger.consume_approval(
            approval.approval_id,
            call_id=request.call_id,
            tenant=request.tenant,
            principal=request.principal,
            server=request.server,
            tool=request.tool,
            args_digest=request.args_digest,
            risk=request.risk,
            now=now,
        )
        if not isinstance(used, ApprovalConsumed):
            raise RuntimeError(f"a fresh approval could not be consumed: {used.reason}")
        return approval.approval_id
