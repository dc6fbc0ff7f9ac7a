"""The session guard between replicas: a session one replica of serve opened is bound in the
shared ledger, so another replica (its own ledger connection, nothing remembered) refuses other
callers too; a session whose binding cannot be recorded is never handed out; logs hide ids.

The replicas are two guards on two real ledger connections to one file, in front of a stand-in
for the SDK's app that issues session ids the way it does (``uuid4().hex`` on the response that
opens a session). ``test_session_binding.py`` drives the real ``codemode serve`` end to end.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from mcp.server import streamable_http_manager
from starlette.types import Receive, Scope, Send

from codemode.ledger import SqliteLedger, open_ledger
from codemode.serve import Identity, TokenMap
from codemode.serve._sessions import HideSessionIds, LedgerSessionBindings, SessionGuard, hide_session_ids

pytestmark = pytest.mark.anyio

ALICE, BOB, ALICE_GLOBEX = "alice-token-0123456789", "bob-token-0123456789", "alice-globex-0123456789"
TOKENS = TokenMap(
    {
        ALICE: Identity("alice", "acme"),
        BOB: Identity("bob", "acme"),
        ALICE_GLOBEX: Identity("alice", "globex"),
    }
)

Logged = Callable[[str], tuple[str, tuple[str, ...]]]
"""A log call of the SDK naming a session: its message and arguments."""


class StandInMcp:
    """Opens a session for a request that names none; answers any other. Records what reached it."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.issued: list[str] = []
        self.reached: list[str | None] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        named = dict(scope["headers"]).get(b"mcp-session-id")
        self.reached.append(None if named is None else named.decode())
        headers = [(b"content-type", b"application/json")]
        if named is None:
            self.issued.append(uuid.uuid4().hex)
            headers.append((b"mcp-session-id", self.issued[-1].encode()))
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"ok": true}'})


@pytest.fixture
def ledgers(tmp_path: Path) -> Iterator[tuple[SqliteLedger, SqliteLedger]]:
    """Two connections to one ledger, as two replicas of serve have."""
    path = tmp_path / "codemode.db"
    with open_ledger(path) as first, open_ledger(path, create=False, recover=False) as second:
        yield first, second


def client(guard: SessionGuard) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://127.0.0.1")


def headers(token: str, session: str | None = None) -> dict[str, str]:
    found = {"Authorization": f"Bearer {token}"}
    if session is not None:
        found["Mcp-Session-Id"] = session
    return found


async def test_a_session_opened_on_one_replica_is_refused_to_others_on_another(
    ledgers: tuple[SqliteLedger, SqliteLedger],
) -> None:
    app_a, app_b = StandInMcp(), StandInMcp()
    replica_a = SessionGuard(app_a, TOKENS, LedgerSessionBindings(ledgers[0]))
    replica_b = SessionGuard(app_b, TOKENS, LedgerSessionBindings(ledgers[1]))
    async with client(replica_a) as a, client(replica_b) as b:
        opened = await a.post("/mcp", headers=headers(ALICE))
        session = opened.headers["mcp-session-id"]
        for stranger in (BOB, ALICE_GLOBEX):
            for method in ("POST", "GET", "DELETE"):
                refused = await b.request(method, "/mcp", headers=headers(stranger, session))
                assert refused.status_code == 404, (stranger, method)
                assert refused.json()["error"]["message"] == "Session not found"
        assert app_b.reached == [], "no stranger's request reached the MCP app"
        assert (await b.post("/mcp", headers=headers(ALICE, session))).status_code == 200
    assert app_b.reached == [session]
    bound = ledgers[1].session_binding(session)
    assert bound is not None and (bound.principal, bound.tenant) == ("alice", "acme")


async def test_a_session_whose_owner_cannot_be_recorded_or_read_is_not_used(
    ledgers: tuple[SqliteLedger, SqliteLedger],
) -> None:
    app = StandInMcp()
    guard = SessionGuard(app, TOKENS, LedgerSessionBindings(ledgers[1]))
    ledgers[1].close()  # the ledger is out of reach
    async with client(guard) as raw:
        response = await raw.post("/mcp", headers=headers(ALICE))
        unchecked = await raw.post("/mcp", headers=headers(ALICE, uuid.uuid4().hex))
    assert response.status_code == 503
    assert "could not record who opened this MCP session" in response.json()["error"]["message"]
    [issued] = app.issued
    assert "mcp-session-id" not in response.headers and issued not in response.text
    assert ledgers[0].session_binding(issued) is None
    assert unchecked.status_code == 503, "a session whose owner cannot be read is not used"
    assert "could not check who opened this MCP session" in unchecked.json()["error"]["message"]
    assert app.reached == [None], "only the opening request reached the MCP app"


LOG_CALLS: dict[str, Logged] = {
    "f-string": lambda sid: (f"Created new transport with session ID: {sid}", ()),
    "argument": lambda sid: ("Rejecting request for session %s: credential does not match", (sid[:64],)),
    "upper-case": lambda sid: ("Session %s crashed", (sid.upper(),)),
}


async def test_a_response_that_opens_no_session_binds_none(
    ledgers: tuple[SqliteLedger, SqliteLedger],
) -> None:
    """The SDK discards the session of a request it refused, even if the refusal names it."""
    app = StandInMcp(status=400)
    async with client(SessionGuard(app, TOKENS, LedgerSessionBindings(ledgers[0]))) as raw:
        assert (await raw.post("/mcp", headers=headers(ALICE))).status_code == 400
    [issued] = app.issued
    assert ledgers[1].session_binding(issued) is None
    assert [e.kind for e in ledgers[1].events()] == []


@pytest.mark.parametrize("call", list(LOG_CALLS))
def test_the_sdks_logs_name_no_session_id(caplog: pytest.LogCaptureFixture, call: str) -> None:
    session = uuid.uuid4().hex
    message, args = LOG_CALLS[call](session)
    hide_session_ids()
    hide_session_ids()  # idempotent: one filter, however often serve starts
    logger = logging.getLogger(streamable_http_manager.__name__)  # the SDK's, imported above
    assert sum(isinstance(f, HideSessionIds) for f in logger.filters) == 1
    with caplog.at_level(logging.INFO):
        logger.info(message, *args)
    assert session not in caplog.text.lower() and "<session id>" in caplog.text
