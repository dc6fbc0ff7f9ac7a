"""Which replica holds each open sandbox session (``run_code``'s ``session_id``), so a run naming
a session another replica holds is refused with the holder's name instead of silently getting a
fresh, empty session where it landed.

A session's interpreter state lives in one sandbox process, on one replica: the row only says
where. Its key is a digest of tenant, principal and session id (the same id of two principals is
two sessions). Claiming is one write transaction, which the store makes exclusive across every
client (``BEGIN IMMEDIATE``, PostgreSQL's writers' lock): of two replicas claiming a new id at
once, exactly one wins and the other reads the winner.

**When a row stops holding its session.** A row is *held* while it is not closed and its holder
is not gone. The holder is gone when

* its lease has run out: every claim (a run's start) moves ``lease_expires_at`` to ``now +
  hold_s``, where the engine asks for ``[serve] session_idle_s`` plus the longest a run may take.
  The holder itself closes a session idle for ``session_idle_s`` after its last run ended, so the
  lease never runs out before the holder would have closed the session anyway; or
* its process is known dead: the row carries the ledger's owner string
  (``host:pid:started:nonce``, :mod:`codemode.ledger._owner`), and on the holder's own host a
  vanished process frees its rows at once instead of at expiry (as for call leases).

A gone holder's row is taken over by the next claim (``sandbox_session_reopened``). A holder
that comes back to a session it lost this way finds the row naming someone else and closes its
own copy (the engine does that), so a session is never served by two replicas. A session closed
by its holder (idle expiry, ``max_sessions`` eviction, an explicit close, the drain at shutdown)
releases its row at once: the id may then be opened anywhere.

Every change is an event (``sandbox_session_opened``, ``_reopened``, ``_used``, ``_closed``), so
``verify`` checks this table like every other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from codemode.errors import LedgerError
from codemode.ledger._context import LedgerContext
from codemode.ledger._digest import escape_part, sha256_text
from codemode.ledger._events import emit
from codemode.ledger._owner import owner_alive
from codemode.ledger._records import opt_time
from codemode.ledger._reduce import Row
from codemode.ledger._time import from_text, later, to_text

__all__ = ["SandboxSessionBook", "SandboxSessionRecord", "SessionClaim", "sandbox_session_key"]


def sandbox_session_key(tenant: str, principal: str, session_id: str) -> str:
    """The row key of a sandbox session: a digest of whose it is and its id (escaped, so tenant
    ``a:b`` with principal ``c`` never meets tenant ``a`` with principal ``b:c``)."""
    return sha256_text(":".join(escape_part(p) for p in (tenant, principal, session_id)).encode())


@dataclass(frozen=True)
class SandboxSessionRecord:
    """One sandbox session as the ledger holds it."""

    tenant: str
    principal: str
    session_id: str
    replica: str
    """The ``[serve] replica`` that holds (or last held) it."""
    owner: str
    """The holder's ledger owner (``host:pid:started:nonce``)."""
    opened_at: datetime
    last_used: datetime
    lease_expires_at: datetime
    closed_at: datetime | None


@dataclass(frozen=True)
class SessionClaim:
    """The outcome of :meth:`SandboxSessionBook.claim`."""

    claimed: bool
    """True: the caller holds the session now (opened, reopened or used again)."""
    holder: SandboxSessionRecord
    """The row as it is now: the caller's when ``claimed``, else the other replica's."""


def _record(row: Row) -> SandboxSessionRecord:
    return SandboxSessionRecord(
        tenant=str(row["tenant"]),
        principal=str(row["principal"]),
        session_id=str(row["session_id"]),
        replica=str(row["replica"]),
        owner=str(row["owner"]),
        opened_at=from_text(str(row["opened_at"])),
        last_used=from_text(str(row["last_used"])),
        lease_expires_at=from_text(str(row["lease_expires_at"])),
        closed_at=opt_time(row["closed_at"]),
    )


class SandboxSessionBook:
    """The sandbox sessions of every replica on one ledger. Obtained from
    ``StoreLedger.sandbox_sessions``; methods block (run them in a thread from async code)."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def _mine(self, row: Row, replica: str) -> bool:
        # The replica's name and this ledger's owner: two engines of one process (tests, a host
        # embedding two) have the owner in common but not the name.
        return row["owner"] == self._ctx.owner and row["replica"] == replica

    def held(self, row: Row, now: datetime) -> bool:
        """Whether ``row`` holds its session at ``now`` (see the module docstring)."""
        if row["closed_at"] is not None or str(row["lease_expires_at"]) <= to_text(now):
            return False
        return owner_alive(cast("str | None", row["owner"])) is not False

    def find(self, tenant: str, principal: str, session_id: str) -> SandboxSessionRecord | None:
        """The session's row (held, closed or left by a gone holder); None if never opened."""
        with self._ctx.read() as tx:
            row = tx.row("sandbox_sessions", sandbox_session_key(tenant, principal, session_id))
        return None if row is None else _record(row)

    def claim(
        self, tenant: str, principal: str, session_id: str, *, replica: str, hold_s: float
    ) -> SessionClaim:
        """Hold the session for ``replica`` until ``hold_s`` from now, unless another holder has
        it: then nothing is written and the claim names that holder. One write transaction."""
        if not session_id:
            raise LedgerError("a sandbox session id must not be empty")
        if not replica:
            raise LedgerError("a replica name must not be empty")
        if not hold_s > 0:
            raise LedgerError(f"a sandbox session's lease must be positive, not {hold_s}")
        key = sandbox_session_key(tenant, principal, session_id)
        with self._ctx.write() as tx:
            now = self._ctx.now()
            stamp, lease = to_text(now), later(now, hold_s)
            row = tx.row("sandbox_sessions", key)
            holder = {
                "replica": replica,
                "owner": self._ctx.owner,
                "opened_at": stamp,
                "last_used": stamp,
                "lease_expires_at": lease,
                "closed_at": None,
            }
            if row is None:
                identity = {"tenant": tenant, "principal": principal, "session_id": session_id}
                fields = {"session_key": key, **identity, **holder}
                new = emit(self._ctx, tx, "sandbox_session_opened", key, fields, creating=True)
            elif row["closed_at"] is None and self._mine(row, replica):
                used = {"last_used": stamp, "lease_expires_at": lease}
                new = emit(self._ctx, tx, "sandbox_session_used", key, used, current=row)
            elif self.held(row, now):
                return SessionClaim(claimed=False, holder=_record(row))
            else:
                new = emit(self._ctx, tx, "sandbox_session_reopened", key, holder, current=row)
        return SessionClaim(claimed=True, holder=_record(new))

    def release(self, tenant: str, principal: str, session_id: str, *, replica: str) -> bool:
        """Record the session closed, if ``replica`` (of this ledger's owner) holds it; False when
        it does not (never opened, closed already, or taken over by another replica)."""
        key = sandbox_session_key(tenant, principal, session_id)
        with self._ctx.write() as tx:
            row = tx.row("sandbox_sessions", key)
            if row is None or row["closed_at"] is not None or not self._mine(row, replica):
                return False
            closed = {"closed_at": to_text(self._ctx.now())}
            emit(self._ctx, tx, "sandbox_session_closed", key, closed, current=row)
        return True
