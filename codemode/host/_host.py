"""The MCP host: one client per configured server, all connected concurrently.

The host owns connection lifetimes and nothing else: it does not decide what may be called
(the broker does) nor what is approved (the pins do). It offers the live catalog of every
server and a way to send a request to one server by its configured name. Those requests are
the broker's ``ToolBackend`` as they stand: the Protocol is structural, so the host needs to
import nothing of the broker to be handed to it.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import mcp_types
from anyio.abc import TaskGroup

from codemode.calls import PLAIN_CALL, SendOptions
from codemode.catalog import ServerCatalog
from codemode.config import Config
from codemode.errors import CatalogError
from codemode.host._connection import SDK_VERSION, ServerConnection, TransportFactory
from codemode.host._inputs import RootsUpdate
from codemode.host._status import ConnectionState, ServerStatus

if TYPE_CHECKING:
    from codemode.auth import HostAuth

CatalogChangeListener = Callable[[ServerCatalog], Awaitable[None]]


class McpHost:
    """Async context manager that connects to every enabled server of a config.

    Entering returns once every server has either connected (and listed its catalog) or
    failed; a failed server is reported in :meth:`statuses` and never raises here.
    """

    def __init__(
        self,
        config: Config,
        *,
        environ: Mapping[str, str] | None = None,
        transports: Mapping[str, TransportFactory] | None = None,
        auth: HostAuth | None = None,
    ) -> None:
        self.config = config
        self._auth = auth
        self._environ = os.environ if environ is None else environ
        unknown = sorted(set(transports or {}) - set(config.servers))
        if unknown:
            raise ValueError(f"transports given for servers that are not configured: {', '.join(unknown)}")
        self._transports = dict(transports or {})
        self._connections: dict[str, ServerConnection] = {}
        self._disabled = [name for name, server in config.servers.items() if not server.enabled]
        self._listeners: list[CatalogChangeListener] = []
        self._task_group: TaskGroup | None = None

    async def __aenter__(self) -> Self:
        self._task_group = await anyio.create_task_group().__aenter__()
        for name, server in self.config.enabled_servers().items():
            connection = ServerConnection(
                name,
                server,
                environ=self._environ,
                on_catalog=self._catalog_changed,
                transport=self._transports.get(name),
                auth=self._auth,
            )
            self._connections[name] = connection
            self._task_group.start_soon(connection.serve, name=f"codemode-server-{name}")
        for connection in self._connections.values():
            await connection.settled.wait()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for connection in self._connections.values():
            connection.stop()
        assert self._task_group is not None
        await self._task_group.__aexit__(exc_type, exc, tb)
        self._task_group = None

    # -- catalog -----------------------------------------------------------------------------

    def on_catalog_change(self, listener: CatalogChangeListener) -> None:
        """Call ``listener`` with a server's new catalog whenever it re-lists (list_changed)."""
        self._listeners.append(listener)

    async def _catalog_changed(self, catalog: ServerCatalog) -> None:
        for listener in list(self._listeners):
            await listener(catalog)

    def catalogs(self) -> list[ServerCatalog]:
        """The current catalog of every connected server, in config order."""
        return [c.catalog for c in self._connections.values() if c.catalog is not None]

    def catalog(self, server: str) -> ServerCatalog | None:
        return self.connection(server).catalog

    def statuses(self) -> list[ServerStatus]:
        statuses = [c.status() for c in self._connections.values()]
        for name in self._disabled:
            server = self.config.servers[name]
            statuses.append(
                ServerStatus(
                    name=name,
                    transport=server.transport,
                    target=server.describe(),
                    state=ConnectionState.DISABLED,
                    sdk_version=SDK_VERSION,
                )
            )
        return statuses

    def connection(self, server: str) -> ServerConnection:
        try:
            return self._connections[server]
        except KeyError:
            raise CatalogError(f"no server named {server!r} is configured and enabled") from None

    @property
    def connections(self) -> Mapping[str, ServerConnection]:
        return self._connections

    async def refresh(self, server: str) -> ServerCatalog:
        return await self.connection(server).refresh_catalog()

    async def update_roots(self, server: str, roots: Sequence[str]) -> RootsUpdate:
        """Offer ``roots`` (absolute paths) to ``server`` from now on, and send it
        ``notifications/roots/list_changed`` where the protocol allows (2025-11-25, on a
        connection that declared the roots capability). ``self.config`` stays as it was.

        Raises:
            CatalogError: no such server is configured and enabled.
            ValueError: a root is not an absolute path.
        """
        return await self.connection(server).inputs.update_roots(roots)

    # -- requests (the broker's ToolBackend) ------------------------------------------------

    async def call_tool(
        self, server: str, tool: str, arguments: dict[str, Any], options: SendOptions = PLAIN_CALL
    ) -> mcp_types.CallToolResult:
        """Call ``tool`` on ``server`` once (see :meth:`ServerConnection.call_tool` for what it raises).

        Raises:
            CatalogError: no such server is configured and enabled; nothing was sent.
        """
        return await self.connection(server).call_tool(tool, arguments, options)

    def long_running(self, server: str, tool: str) -> bool:
        """Whether calls of ``tool`` run as tasks, which may take longer than ``call_timeout``.
        False for a server that is not configured: the call itself says so."""
        connection = self._connections.get(server)
        return connection is not None and connection.runs_as_task(tool)

    async def read_resource(self, server: str, uri: str) -> mcp_types.ReadResourceResult:
        return await self.connection(server).read_resource(uri)

    async def get_prompt(
        self, server: str, name: str, arguments: dict[str, str]
    ) -> mcp_types.GetPromptResult:
        return await self.connection(server).get_prompt(name, arguments)
