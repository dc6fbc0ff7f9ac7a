"""Which sandbox session a run gets: found, or opened within ``[serve] max_sessions``, closing the
idle ones (``[serve] session_idle_s``) first. A busy session is never closed to make room: that
would kill a run and leave its writes unknown.

Several ``serve`` replicas on one ledger: a session's interpreter state lives in one replica's
sandbox, so each session is claimed in the ledger (:class:`SessionLedger`, which
``codemode.ledger.SandboxSessionBook`` satisfies) by the replica that opens it, and every run
claims it again. A run naming a session another replica holds is refused with a
:class:`SandboxError` naming the session and that replica, instead of getting a fresh, empty
session here. Every close (idle, evicted, explicit, at shutdown) releases the claim. Without a
ledger that keeps sessions, or with a private in-memory one, sessions are this process's alone,
as before.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import anyio

from codemode.calls import RunBinding
from codemode.config import Config, ServeConfig
from codemode.errors import CodemodeError, SandboxError
from codemode.ledger import Ledger, SessionClaim, StoreLedger
from codemode.sandbox import SandboxManager, Session

__all__ = ["EngineSessions", "SessionLedger", "SessionReplica"]

log = logging.getLogger("codemode")

CLOSE_ALL_S = 30.0
"""How long closing every session at shutdown may take (sandboxes destroyed, claims released)."""


class SessionLedger(Protocol):
    """Who holds each sandbox session, shared by every replica (blocking calls)."""

    def claim(
        self, tenant: str, principal: str, session_id: str, *, replica: str, hold_s: float
    ) -> SessionClaim: ...
    def release(self, tenant: str, principal: str, session_id: str, *, replica: str) -> bool: ...


@dataclass(frozen=True)
class SessionReplica:
    """This replica's claims on sandbox sessions, in a ledger every replica shares."""

    ledger: SessionLedger
    name: str
    """``[serve] replica``: how a refusal names the holder."""

    @classmethod
    def of(cls, ledger: Ledger | None, serve: ServeConfig) -> SessionReplica | None:
        """Claims in ``ledger``'s ``sandbox_sessions``; None for a ledger that keeps none, or that
        no other replica can share (a private ``:memory:`` one): nothing to claim against."""
        if not isinstance(ledger, StoreLedger) or ledger.store.location == ":memory:":
            return None
        return cls(ledger.sandbox_sessions, serve.replica_name)

    async def claim(self, session: Session | None, key: tuple[str, str, str], hold_s: float) -> None:
        """Hold the session ``key`` (principal, tenant, id) for ``hold_s``, or raise naming its
        holder; ``session``, this replica's copy, is closed when another replica took it over."""
        principal, tenant, session_id = key
        claim = partial(self.ledger.claim, replica=self.name, hold_s=hold_s)
        got = await anyio.to_thread.run_sync(claim, tenant, principal, session_id)
        if got.claimed:
            return
        # Our lease ran out and another replica opened it: ours is stale. Closed once idle; a run
        # in it (one that outlasted the lease) finishes, since killing it would leave its writes
        # unknown.
        if session is not None and not session.busy:
            await session.aclose()
        raise SandboxError(
            f"sandbox session {session_id!r} is held by replica {got.holder.replica!r} (opened "
            f"{got.holder.opened_at:%Y-%m-%d %H:%M:%S} UTC), not by this one ({self.name!r}): its "
            "state lives in that replica's sandbox. Send this client's requests to that replica "
            "(route by Mcp-Session-Id), or close that session there, or use a new session_id"
        )

    async def release(self, key: tuple[str, str, str]) -> None:
        """Release the claim on a closed session ``key`` (principal, tenant, id); a failure is
        logged, not raised (the lease runs out anyway)."""
        principal, tenant, session_id = key
        release = partial(self.ledger.release, replica=self.name)
        try:
            await anyio.to_thread.run_sync(release, tenant, principal, session_id)
        except (OSError, CodemodeError) as exc:
            log.warning("could not release sandbox session %r in the ledger: %s", session_id, exc)


async def _close(session: Session, replica: SessionReplica | None) -> None:
    await session.aclose()
    if replica is not None:
        await replica.release(session.key)


async def expire_idle_sessions(
    sandboxes: SandboxManager, idle_s: float, replica: SessionReplica | None = None
) -> int:
    """Close the sessions unused for ``idle_s`` (or dead); how many were closed."""
    cutoff = time.monotonic() - idle_s
    stale = [s for s in sandboxes.sessions if not s.busy and (s.last_used < cutoff or not s.alive)]
    for session in stale:
        await _close(session, replica)
    return len(stale)


async def session_for(
    sandboxes: SandboxManager,
    serve: ServeConfig,
    *,
    principal: str,
    tenant: str,
    session_id: str,
    hold_pool_slot: bool = False,
    replica: SessionReplica | None = None,
    run_s: float = 0.0,
) -> Session:
    """The session for (principal, tenant, id), opened on first use; idle and excess ones closed.

    With ``replica``, the session is claimed for ``session_idle_s`` plus ``run_s`` (the longest
    the run about to start may take), before anything is opened: a session another replica holds
    raises :class:`SandboxError` naming it."""
    await expire_idle_sessions(sandboxes, serve.session_idle_s, replica)
    key = (principal, tenant, session_id)
    found = sandboxes.find_session(principal=principal, tenant=tenant, session_id=session_id)
    if found is not None and not found.alive:
        await found.aclose()  # dead: opened again below, under the claim that still holds
        found = None
    if found is None and serve.max_sessions == 0:
        raise SandboxError("sessions are disabled ([serve] max_sessions = 0)")
    if replica is not None:
        await replica.claim(found, key, serve.session_idle_s + run_s)
    if found is not None:
        return found
    try:
        return await _opened(sandboxes, serve, key, hold_pool_slot, replica)
    except BaseException:
        # Claimed but not opened: let another replica have it, unless a run of ours opened it
        # meanwhile (two first runs of one new id at once: the second one's open fails).
        if (
            replica is not None
            and sandboxes.find_session(principal=principal, tenant=tenant, session_id=session_id) is None
        ):
            with anyio.CancelScope(shield=True):
                await replica.release(key)
        raise


async def _opened(
    sandboxes: SandboxManager,
    serve: ServeConfig,
    key: tuple[str, str, str],
    hold_pool_slot: bool,
    replica: SessionReplica | None,
) -> Session:
    limit = serve.max_sessions
    while len(open_sessions := sandboxes.sessions) >= limit:
        idle = [s for s in open_sessions if not s.busy]
        if not idle:
            raise SandboxError(
                f"all {len(open_sessions)} sandbox sessions are running programs ([serve] max_sessions "
                f"= {limit}); wait for one to finish, close one, or raise max_sessions"
            )
        await _close(min(idle, key=lambda s: s.last_used), replica)
    principal, tenant, session_id = key
    return await sandboxes.open_session(
        principal=principal, tenant=tenant, session_id=session_id, hold_pool_slot=hold_pool_slot
    )


@dataclass(frozen=True)
class EngineSessions:
    """The engine's sandbox sessions: its manager's, claimed through ``replica`` (if any)."""

    sandboxes: SandboxManager
    config: Config
    replica: SessionReplica | None

    async def get(
        self,
        binding: RunBinding,
        session_id: str,
        *,
        hold_pool_slot: bool = False,
        run_s: float | None = None,
    ) -> Session:
        """:func:`session_for` the binding's principal and tenant; ``run_s``: the run's wall-time
        limit (default ``[sandbox] wall_time_s``, as for the run), which the claim must outlast."""
        return await session_for(
            self.sandboxes,
            self.config.serve,
            principal=binding.principal,
            tenant=binding.tenant,
            session_id=session_id,
            hold_pool_slot=hold_pool_slot,
            replica=self.replica,
            run_s=self.config.sandbox.wall_time_s if run_s is None else run_s,
        )

    async def expire_idle(self) -> int:
        return await expire_idle_sessions(self.sandboxes, self.config.serve.session_idle_s, self.replica)

    async def close(self, binding: RunBinding, session_id: str) -> None:
        """Close the binding's session ``session_id`` if this replica has it open."""
        found = self.sandboxes.find_session(
            principal=binding.principal, tenant=binding.tenant, session_id=session_id
        )
        if found is not None:
            await _close(found, self.replica)

    async def close_all(self) -> None:
        """Close every session (the drain at shutdown), releasing each claim: shielded from the
        shutdown's cancellation for a while, so other replicas need not wait for the leases to end."""
        with anyio.move_on_after(CLOSE_ALL_S, shield=True):
            for session in self.sandboxes.sessions:
                await _close(session, self.replica)
