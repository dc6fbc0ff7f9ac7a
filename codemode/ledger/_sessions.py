"""MCP session bindings: which principal and tenant opened each session of ``codemode serve``.

The ledger is the store every replica of serve shares, so a session one replica opened is
refused to other callers by all of them. A binding is written once and never changes: rebinding
a session would hand it to someone else. Sessions are known here only by a digest of their id:
the id is half of what it takes to use a session, and more people read a ledger (operators,
auditors) than should hold one.
"""

from __future__ import annotations

from codemode.ledger._context import LedgerContext
from codemode.ledger._digest import sha256_text
from codemode.ledger._errors import LedgerStateError
from codemode.ledger._events import emit
from codemode.ledger._models import SessionBinding
from codemode.ledger._records import session_binding
from codemode.ledger._time import to_text


def session_digest(session_id: str) -> str:
    """``sha256:<hex>`` of a session id: how the ledger names the session."""
    return sha256_text(session_id.encode())


def bind_session(ctx: LedgerContext, session_id: str, principal: str, tenant: str) -> SessionBinding:
    key = session_digest(session_id)
    with ctx.write() as tx:
        found = tx.row("mcp_sessions", key)
        if found is not None:
            # Binding again to the same caller is a retry (its commit went unconfirmed): harmless.
            if (found["principal"], found["tenant"]) != (principal, tenant):
                raise LedgerStateError(
                    "this MCP session is bound to another principal or tenant already; "
                    "a session is never rebound (open a new one)"
                )
            return session_binding(found)
        fields = {
            "session_digest": key,
            "principal": principal,
            "tenant": tenant,
            "owner": ctx.owner,
            "bound_at": to_text(ctx.now()),
        }
        row = emit(ctx, tx, "mcp_session_bound", key, fields, creating=True)
    return session_binding(row)


def get_session(ctx: LedgerContext, session_id: str) -> SessionBinding | None:
    with ctx.read() as tx:
        row = tx.row("mcp_sessions", session_digest(session_id))
    return None if row is None else session_binding(row)
