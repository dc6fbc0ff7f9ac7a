"""A console on a real ledger and a stand-in engine, driven in-process over ASGI (no sockets)."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx

from codemode.broker import ApprovalRequest
from codemode.config import Config, config_from_mapping
from codemode.host import ConnectionState, ServerStatus
from codemode.ledger import SqliteLedger, open_ledger
from codemode.serve._app import Identity, TokenMap
from codemode.serve._run import transport_security
from codemode.serve.console._app import Console
from codemode.serve.console._auth import Sessions
from codemode.serve.console._desk import ApprovalDesk
from codemode.serve.console._scope import ALL_TENANTS
from codemode.stubs import VirtualTree
from tests.skills._deployment import crm_tree

ORIGIN = "http://127.0.0.1:8765"
OPERATOR_TOKEN = "ops-token-0123456789abcdef"
ALICE_TOKEN = "alice-token-0123456789abcdef"
ACME_OPS_TOKEN = "acme-ops-token-0123456789abcdef"
GLOBEX_OPS_TOKEN = "globex-ops-token-0123456789abcdef"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
"""An operator of every tenant (``console_tenants = ["*"]``)."""
ALICE = {"Authorization": f"Bearer {ALICE_TOKEN}"}
ACME_OPS = {"Authorization": f"Bearer {ACME_OPS_TOKEN}"}
"""An operator of tenant acme only (principal ``acme-ops``)."""
GLOBEX_OPS = {"Authorization": f"Bearer {GLOBEX_OPS_TOKEN}"}
"""An operator of tenant globex only (principal ``globex-ops``)."""


REPLICA = "a:8765"
"""The replica name of the kit's desk (and of :func:`desk_on_ledger`'s)."""


@dataclass
class FakeEngine:
    """What the console reads of a running engine: server states, pin drift, the approved tools'
    tree (crm's get_customer and add_note, as the skill tests approve them) and the policy."""

    drifted: list[str] = field(default_factory=lambda: ["crm/add_note (changed)"])
    config: Config = field(default_factory=lambda: config_from_mapping({}))
    tree: VirtualTree = field(default_factory=crm_tree)

    def approved_tree(self) -> VirtualTree:
        return self.tree

    def statuses(self) -> list[ServerStatus]:
        return [
            ServerStatus(
                name="crm", transport="stdio", target="crm", state=ConnectionState.READY, sdk_version="x"
            ),
            ServerStatus(
                name="docs",
                transport="http",
                target="http://127.0.0.1:1/mcp",
                state=ConnectionState.FAILED,
                sdk_version="x",
                error="connection refused",
            ),
        ]

    def drift(self) -> list[str]:
        return list(self.drifted)


@dataclass
class Kit:
    client: httpx.AsyncClient
    console: Console
    desk: ApprovalDesk
    ledger: SqliteLedger
    engine: FakeEngine


@asynccontextmanager
async def console_kit(
    tmp_path: Path, engine: FakeEngine | None = None, *, ledger_at: str | None = None, replica: str = REPLICA
) -> AsyncGenerator[Kit]:
    """A console on the ledger ``tmp_path/codemode.db`` (or ``ledger_at``, a PostgreSQL URL);
    two kits on one ledger are two replicas (name them apart with ``replica``)."""
    ledger = open_ledger(ledger_at or tmp_path / "codemode.db")
    tokens = TokenMap(
        {
            OPERATOR_TOKEN: Identity("ops", "acme", frozenset({"operator"}), console_tenants=None),
            ACME_OPS_TOKEN: Identity("acme-ops", "acme", frozenset({"operator"}), frozenset({"acme"})),
            GLOBEX_OPS_TOKEN: Identity(
                "globex-ops", "globex", frozenset({"operator"}), frozenset({"globex"})
            ),
            ALICE_TOKEN: Identity("alice", "acme"),
        }
    )
    desk = ApprovalDesk(ledger.approval_tickets, replica=replica)
    security = transport_security(config_from_mapping({}), "127.0.0.1", 8765)
    engine = engine or FakeEngine()
    console = Console(ledger, engine, desk, Sessions(tokens), security, ledger.location)
    transport = httpx.ASGITransport(app=console.app())
    try:
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
            yield Kit(client, console, desk, ledger, engine)
    finally:
        ledger.close()


@contextmanager
def desk_on_ledger(
    tmp_path: Path, *, clock: Callable[[], float] = time.time, replica: str = REPLICA
) -> Generator[ApprovalDesk]:
    """A desk on a ledger of its own (``tmp_path/codemode.db``), without a console."""
    with open_ledger(tmp_path / "codemode.db") as ledger:
        yield ApprovalDesk(ledger.approval_tickets, replica=replica, clock=clock)


async def until_pending(desk: ApprovalDesk, count: int = 1) -> None:
    """Wait until ``count`` tickets are on the desk: a run opens its ticket in a worker thread
    (a ledger write), so a task waiting for that thread looks blocked before the ticket is there."""
    with anyio.fail_after(10):
        while len(await anyio.to_thread.run_sync(desk.pending, ALL_TENANTS)) < count:
            await anyio.sleep(0.01)


def request_for(
    call_id: str = "run_0123456789abcdef/0", *, ttl: float = 300.0, tenant: str = "acme"
) -> ApprovalRequest:
    return ApprovalRequest(
        call_id=call_id,
        principal="alice",
        tenant=tenant,
        server="crm",
        tool="add_note",
        risk="medium",
        why="crm/add_note is medium risk (it may write)",
        arguments_summary='{"customer_id": "CUST-0001", "text": "hello"}',
        args_digest="sha256:" + "ab" * 32,
        expires_at=time.time() + ttl,
    )


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None, "the page carries no CSRF token"
    return found.group(1)
