"""Who is using the console: operator sessions, their CSRF tokens, and the role check.

A browser cannot send a bearer header when it opens a page, so the operator pastes a token
once (``/console/login``) and gets a session cookie: random, ``HttpOnly``, ``SameSite=Strict``,
scoped to the console's path, and worth nothing after the server stops. Scripts may send the
bearer header on every request instead; they get a session keyed by the token, so both paths
meet the same checks. Every state change must carry the session's CSRF token (a form field or
the ``X-CSRF-Token`` header); the Host and Origin checks of the MCP endpoint run first.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from codemode.config import OPERATOR
from codemode.serve._app import Identity, TokenMap
from codemode.serve.console._scope import TenantScope

SESSION_COOKIE = "codemode_console"
LOGIN_COOKIE = "codemode_console_login"
"""Double-submit nonce of the login form: logging in changes state too (login CSRF)."""
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SESSION_IDLE_S = 8 * 3600.0
MAX_SESSIONS = 256


class AuthError(Exception):
    """A refused console request; the message says what went wrong and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Session:
    key: str
    identity: Identity
    csrf: str
    last_used: float

    @property
    def operator(self) -> str:
        return self.identity.principal or "?"

    @property
    def scope(self) -> TenantScope:
        """The tenants this operator sees and answers (``console_tenants`` of their token)."""
        return TenantScope(self.identity.console_tenants)


def _not_operator(identity: Identity) -> AuthError:
    who = identity.principal or "this token's principal"
    return AuthError(
        403,
        f"{who} is not an operator: the console is open only to tokens with the {OPERATOR!r} role. "
        f'Ask for an operator token, or add roles = ["{OPERATOR}"] to its [serve.tokens.<name>] '
        "table and restart codemode serve.",
    )


class Sessions:
    """The console's sessions, in memory (a restart logs everyone out)."""

    def __init__(self, tokens: TokenMap, clock: Callable[[], float] = time.monotonic) -> None:
        self._tokens = tokens
        self._clock = clock
        self._sessions: dict[str, Session] = {}

    def _open(self, key: str, identity: Identity) -> Session:
        self._expire()
        if len(self._sessions) >= MAX_SESSIONS:  # never grow without bound: drop the oldest
            oldest = min(self._sessions.values(), key=lambda s: s.last_used)
            del self._sessions[oldest.key]
        session = Session(key, identity, secrets.token_urlsafe(32), self._clock())
        self._sessions[key] = session
        return session

    def _expire(self) -> None:
        cutoff = self._clock() - SESSION_IDLE_S
        for key in [k for k, s in self._sessions.items() if s.last_used < cutoff]:
            del self._sessions[key]

    def _identity(self, token: str) -> Identity:
        identity = self._tokens.lookup(f"Bearer {token}")
        if identity is None:
            raise AuthError(401, "that token is not one of [serve.tokens]: check it and try again.")
        if not identity.is_operator:
            raise _not_operator(identity)
        return identity

    def login(self, token: str) -> Session:
        """A new cookie session for the holder of ``token``, who must be an operator."""
        return self._open(secrets.token_urlsafe(32), self._identity(token.strip()))

    def logout(self, session: Session) -> None:
        self._sessions.pop(session.key, None)

    def current(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> Session | None:
        """The request's operator session; None when it carries no credentials at all.

        Raises :class:`AuthError` for a wrong token or a principal without the operator role.
        """
        authorization = headers.get("authorization")
        if authorization is not None:
            if not authorization.lower().startswith("bearer "):
                raise AuthError(401, "send the token as 'Authorization: Bearer <token>'.")
            token = authorization[7:].strip()
            identity = self._identity(token)
            # Keyed by a digest, not the token: the table never holds a usable credential.
            key = "bearer:" + hashlib.sha256(token.encode()).hexdigest()
            session = self._sessions.get(key) or self._open(key, identity)
        else:
            cookie = cookies.get(SESSION_COOKIE)
            if not cookie:
                return None
            self._expire()
            found = self._sessions.get(cookie)
            if found is None:
                raise AuthError(
                    401, "your console session has ended (idle, or the server restarted): log in again."
                )
            session = found
        session.last_used = self._clock()
        return session


def check_csrf(session: Session, presented: str | None) -> None:
    """A state change must echo the session's CSRF token, which a foreign page cannot read."""
    if not presented or not hmac.compare_digest(presented.encode(), session.csrf.encode()):
        raise AuthError(
            403,
            "this change was refused: it did not carry the console's CSRF token (a request from "
            "another site, or a page from an earlier session). Reload the console and try again.",
        )


def check_login_nonce(cookie: str | None, field: str | None) -> None:
    if not cookie or not field or not hmac.compare_digest(cookie.encode(), field.encode()):
        raise AuthError(
            403,
            "this login was refused: the form did not come from this console (or cookies are off). "
            "Open /console/login again and submit the form from there.",
        )
