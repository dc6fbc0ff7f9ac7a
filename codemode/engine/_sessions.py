"""Which sandbox session a run gets: found, or opened within ``[serve] max_sessions``, closing the
idle ones (``[serve] session_idle_s``) first. A busy session is never closed to make room: that
would kill a run and leave its writes unknown."""

from __future__ import annotations

import time

from codemode.config import ServeConfig
from codemode.errors import SandboxError
from codemode.sandbox import SandboxManager, Session

__all__ = ["expire_idle_sessions", "session_for"]


async def expire_idle_sessions(sandboxes: SandboxManager, idle_s: float) -> int:
    """Close the sessions unused for ``idle_s`` (or dead); how many were closed."""
    cutoff = time.monotonic() - idle_s
    stale = [s for s in sandboxes.sessions if not s.busy and (s.last_used < cutoff or not s.alive)]
    for session in stale:
        await session.aclose()
    return len(stale)


async def session_for(
    sandboxes: SandboxManager,
    serve: ServeConfig,
    *,
    principal: str,
    tenant: str,
    session_id: str,
    hold_pool_slot: bool = False,
) -> Session:
    """The session for (principal, tenant, id), opened on first use; idle and excess ones closed."""
    await expire_idle_sessions(sandboxes, serve.session_idle_s)
    found = sandboxes.find_session(principal=principal, tenant=tenant, session_id=session_id)
    if found is not None and found.alive:
        return found
    if found is not None:
        await found.aclose()
    limit = serve.max_sessions
    if limit == 0:
        raise SandboxError("sessions are disabled ([serve] max_sessions = 0)")
    while len(open_sessions := sandboxes.sessions) >= limit:
        idle = [s for s in open_sessions if not s.busy]
        if not idle:
            raise SandboxError(
                f"all {len(open_sessions)} sandbox sessions are running programs ([serve] max_sessions "
                f"= {limit}); wait for one to finish, close one, or raise max_sessions"
            )
        await min(idle, key=lambda s: s.last_used).aclose()
    return await sandboxes.open_session(
        principal=principal, tenant=tenant, session_id=session_id, hold_pool_slot=hold_pool_slot
    )
