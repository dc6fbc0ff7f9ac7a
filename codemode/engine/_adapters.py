"""Small adapters that let the broker talk to the host and the ledger through its own seams.

The broker depends on Protocols (``CatalogView``, ``ApprovalStore``); these classes implement
them on the concrete MCP host, configuration and ledger, so neither side imports the other's
internals. (Its ``ToolBackend`` needs no adapter: the host is one as it stands.)
"""

from __future__ import annotations

from datetime import UTC, datetime

from codemode.broker import ApprovalAnswer, ApprovalRequest
from codemode.catalog import ServerCatalog, ToolSpec
from codemode.config import Config
from codemode.host import ConnectionState, McpHost
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
