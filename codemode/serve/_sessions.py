"""Every MCP session (Streamable HTTP, 2025-11-25) belongs to the principal and tenant whose
token opened it.

The SDK finds a request's session by its ``Mcp-Session-Id`` alone. Without this module, anyone
with a valid token of their own and another caller's session id could answer that session's
pending approval question, read its stream or end it. :class:`SessionGuard` records who opened
each session before the response that issues the id leaves, and answers a request that names a
session opened by someone else with the very 404 an unknown session gets: the session's
existence is not revealed either.

The bindings live in a :class:`SessionBindings` store. :class:`LedgerSessionBindings` keeps them
in the ledger, the store that every replica of serve shares, so a session opened on one replica
is refused to other callers on all of them.

Session ids are also kept out of the logs (:func:`hide_session_ids`): the SDK logs them at INFO,
which ``codemode serve -v`` shows.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from typing import Protocol

import anyio
import mcp_types
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codemode.ledger import StoreLedger
from codemode.serve._app import TokenMap

log = logging.getLogger("codemode.serve")

Caller = tuple[str, str]
"""A session's owner: ``(principal, tenant)``, the tenant ``""`` for a token that names none."""

_HEADER = MCP_SESSION_ID_HEADER.encode("latin-1")
REMEMBERED_SESSIONS = 10_000
"""How many bindings a replica keeps in memory (the SDK's default limit of open sessions)."""


class SessionBindings(Protocol):
    """Where the owner of each session is kept; every replica of serve must read the same one."""

    async def bind(self, session_id: str, caller: Caller) -> None:
        """Record that ``caller`` opened ``session_id``; raises if it cannot be recorded."""
        ...

    async def owner(self, session_id: str) -> Caller | None:
        """Who opened ``session_id``; None if no one did (as far as any replica recorded)."""
        ...


class LedgerSessionBindings:
    """Bindings in the ledger (as digests of the ids), remembered once seen. A binding never
    changes, so remembering it is safe; only a session this replica has not seen yet costs a
    read, since another replica may have bound it meanwhile. Unknown ids are not remembered:
    they would let anyone fill the memory."""

    def __init__(self, ledger: StoreLedger, remember: int = REMEMBERED_SESSIONS) -> None:
        self._ledger = ledger
        self._seen: OrderedDict[str, Caller] = OrderedDict()
        self._remember = remember

    async def bind(self, session_id: str, caller: Caller) -> None:
        principal, tenant = caller
        await anyio.to_thread.run_sync(
            lambda: self._ledger.bind_session(session_id, principal=principal, tenant=tenant)
        )
        self._keep(session_id, caller)

    async def owner(self, session_id: str) -> Caller | None:
        known = self._seen.get(session_id)
        if known is not None:
            self._seen.move_to_end(session_id)
            return known
        found = await anyio.to_thread.run_sync(lambda: self._ledger.session_binding(session_id))
        if found is None:
            return None
        caller = (found.principal, found.tenant)
        self._keep(session_id, caller)
        return caller

    def _keep(self, session_id: str, caller: Caller) -> None:
        self._seen[session_id] = caller
        self._seen.move_to_end(session_id)
        while len(self._seen) > self._remember:
            self._seen.popitem(last=False)


def _jsonrpc_error(status: int, code: int, message: str) -> Response:
    """A JSON-RPC error without a request id, as the SDK answers outside any request."""
    error = mcp_types.ErrorData(code=code, message=message)
    body = mcp_types.JSONRPCError(jsonrpc="2.0", id=None, error=error)
    text = body.model_dump_json(by_alias=True, exclude_unset=True)
    return Response(text, status_code=status, media_type="application/json")


def _not_found() -> Response:
    """What the SDK answers for a session it does not know, byte for byte."""
    return _jsonrpc_error(404, mcp_types.INVALID_REQUEST, "Session not found")


def _ledger_unreachable(what: str) -> Response:
    return _jsonrpc_error(
        503,
        mcp_types.INTERNAL_ERROR,
        f"codemode could not {what} (its ledger is out of reach), so the session is not used: "
        "try again, and check the ledger if it keeps failing",
    )


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class SessionGuard:
    """ASGI middleware around the MCP app: binds each new session to the caller that opened it,
    and lets a request that names a session through only for that caller."""

    def __init__(self, app: ASGIApp, tokens: TokenMap, bindings: SessionBindings) -> None:
        self.app, self.tokens, self.bindings = app, tokens, bindings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        who = self.tokens.lookup(_header(headers, b"authorization"))
        session = _header(headers, _HEADER)
        if who is None:
            # The bearer middleware in front has refused this already; never let it through here.
            await _not_found()(scope, receive, send)
            return
        caller: Caller = (who.principal or "", who.tenant or "")
        if session is None:
            await self.app(scope, receive, self._binding(scope, receive, send, caller))
            return
        try:
            owner = await self.bindings.owner(session)
        except Exception:
            log.exception("could not read who opened an MCP session; refusing the request")
            await _ledger_unreachable("check who opened this MCP session")(scope, receive, send)
            return
        if owner == caller:
            await self.app(scope, receive, send)
        else:
            await _not_found()(scope, receive, send)

    def _binding(self, scope: Scope, receive: Receive, send: Send, caller: Caller) -> Send:
        """``send``, recording who opened the session a response issues before it leaves. If that
        cannot be recorded, the client gets a 503 instead and never learns the session's id; the
        SDK drops the unused session at its idle timeout."""
        refused = False

        async def forward(message: Message) -> None:
            nonlocal refused
            if refused:
                return  # the rest of a response that was replaced
            # Only a successful response opens a session: the SDK discards one it refused.
            if message["type"] == "http.response.start" and int(message["status"]) < 400:
                issued = _header(list(message.get("headers", [])), _HEADER)
                if issued is not None:
                    try:
                        await self.bindings.bind(issued, caller)
                    except Exception:
                        log.exception("could not record who opened an MCP session; refusing the session")
                        refused = True
                        await _ledger_unreachable("record who opened this MCP session")(scope, receive, send)
                        return
            await send(message)

        return forward


_SESSION_ID = re.compile(r"[0-9a-fA-F]{32,}")
"""A session id as the SDK mints them (``uuid4().hex``). An arbitrary string a client sends as
one names no session: the only ids that open anything are the ones minted."""


class HideSessionIds(logging.Filter):
    """Masks session ids in log records (the message as it will be formatted)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = _SESSION_ID.sub("<session id>", message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


_FILTER = HideSessionIds()


def hide_session_ids() -> None:
    """Put :class:`HideSessionIds` on the MCP SDK's loggers. A logger's filter applies to the
    records logged on it, not to those of its children, so every ``mcp.*`` logger gets it; they
    exist once the SDK's modules are imported, which serving over HTTP has done by now."""
    names = [name for name in logging.root.manager.loggerDict if name == "mcp" or name.startswith("mcp.")]
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
