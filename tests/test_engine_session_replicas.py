"""Two engines (two ``serve`` replicas) on one ledger: a sandbox session stays on the replica that
opened it. A run naming it on the other replica is refused with an error naming the session and
its holder, instead of silently getting a fresh, empty session there; once the holder closes it
(or shuts down), the other replica may open that id.

The MCP server is in memory and programs run in threads of this process
(``codemode.testing.in_process_sandbox``)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest

from codemode import CodeMode
from codemode.engine._sessions import SessionReplica
from codemode.errors import SandboxError
from codemode.ledger import SandboxSessionRecord, SessionClaim, open_ledger
from codemode.sandbox import Session
from codemode.testing import in_process_sandbox, memory_ledger
from tests.test_engine_in_memory import approved_in_memory_crm

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def replica(tmp_path: Path, name: str, stack: AsyncExitStack) -> AsyncGenerator[CodeMode]:
    """An engine named ``name`` among the replicas, on the ledger file every replica shares (a
    ledger object of its own, as in its own process)."""
    config, transports = await approved_in_memory_crm(
        tmp_path, sandbox={"pool_size": 0, "wall_time_s": 10}, serve={"replica": name}
    )
    ledger = stack.enter_context(open_ledger(tmp_path / "shared.db"))
    engine = CodeMode(config, ledger=ledger, transports=transports, sandbox_backend=in_process_sandbox())
    async with engine:
        yield engine


async def test_a_session_held_by_one_replica_is_refused_by_the_other_naming_both(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(replica(tmp_path, "replica-a", stack))
        b = await stack.enter_async_context(replica(tmp_path, "replica-b", stack))
        assert (await a.run("x = 'kept in a'", session_id="shared")).status == "ok"
        with pytest.raises(SandboxError) as refused:
            await b.run("x", session_id="shared")
        message = str(refused.value)
        assert "'shared'" in message and "'replica-a'" in message and "'replica-b'" in message
        assert "route by Mcp-Session-Id" in message and "new session_id" in message
        assert b._sandboxes is not None and b._sandboxes.sessions == []  # pyright: ignore[reportPrivateUsage]
        # The holder still has it, state and all.
        assert (await a.run("x", session_id="shared")).result == "kept in a"
        # Another principal's session of that id is another session: b may open it.
        assert (await b.run("x = 1", session_id="shared", principal="bob")).status == "ok"

        await a.close_session("shared")
        opened = await b.run("x = 'now in b'", session_id="shared")
        assert opened.status == "ok", opened.error
        assert (await b.run("x", session_id="shared")).result == "now in b"
        with pytest.raises(SandboxError, match="held by replica 'replica-b'"):
            await a.run("x", session_id="shared")


async def test_sessions_expired_evicted_or_drained_are_released_for_the_other_replica(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(replica(tmp_path, "replica-a", stack))
        async with replica(tmp_path, "replica-b", stack) as b:
            assert (await b.run("x = 1", session_id="idle")).status == "ok"
            assert (await b.run("x = 1", session_id="drained")).status == "ok"
            assert b._sandboxes is not None  # pyright: ignore[reportPrivateUsage]
            for session in b._sandboxes.sessions:  # pyright: ignore[reportPrivateUsage]
                if session.session_id == "idle":
                    session.last_used -= 10_000  # older than session_idle_s
            assert await b.expire_idle_sessions() == 1
            assert (await a.run("x = 2", session_id="idle")).status == "ok", "expired: released"
            with pytest.raises(SandboxError, match="'drained' is held by replica 'replica-b'"):
                await a.run("x", session_id="drained")
        # b shut down: its sessions closed, and released.
        assert (await a.run("x = 3", session_id="drained")).status == "ok"
        ledger = a._ledger  # pyright: ignore[reportPrivateUsage]
        assert ledger is not None and ledger.verify().ok


async def test_a_private_in_memory_ledger_claims_nothing(tmp_path: Path) -> None:
    config, transports = await approved_in_memory_crm(tmp_path, sandbox={"pool_size": 0, "wall_time_s": 10})
    ledger = memory_ledger()
    async with CodeMode(
        config, ledger=ledger, transports=transports, sandbox_backend=in_process_sandbox()
    ) as engine:
        assert (await engine.run("x = 1", session_id="mine")).status == "ok"
        assert (await engine.run("x", session_id="mine")).result == 1
        await engine.close_session("mine")
    assert not [e for e in ledger.events() if e.kind.startswith("sandbox_session")], "no one to share it"


class _TakenOver:
    """A ledger in which another replica holds every session."""

    def claim(
        self, tenant: str, principal: str, session_id: str, *, replica: str, hold_s: float
    ) -> SessionClaim:
        now = datetime.now(UTC)
        holder = SandboxSessionRecord(
            tenant=tenant,
            principal=principal,
            session_id=session_id,
            replica="other:1",
            owner="other-host:1:0:x",
            opened_at=now,
            last_used=now,
            lease_expires_at=now,
            closed_at=None,
        )
        return SessionClaim(claimed=False, holder=holder)

    def release(self, tenant: str, principal: str, session_id: str, *, replica: str) -> bool:
        return False


class _Copy:
    def __init__(self, busy: bool) -> None:
        self.busy = busy
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


@pytest.mark.parametrize("busy", [True, False])
async def test_a_stale_copy_is_closed_only_once_no_run_is_in_it(busy: bool) -> None:
    """A run that outlasted this replica's lease finishes in its copy (killing it would leave its
    writes unknown); an idle stale copy is closed. Either way the new run is refused by name."""
    copy = _Copy(busy)
    replica = SessionReplica(_TakenOver(), "this:1")
    with pytest.raises(SandboxError, match="held by replica 'other:1'"):
        await replica.claim(cast(Session, copy), ("alice", "acme", "analysis"), 60.0)
    assert copy.closed is not busy
