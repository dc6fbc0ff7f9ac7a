"""Getting the person's consent at the authorization server: the three ways a sign-in can go.

The OAuth client hands over an authorization URL and needs back the ``code`` (with ``state``
and ``iss``) that the authorization server appends to the redirect URI:

- :class:`BrowserSignIn` opens the URL in a browser and listens on the loopback redirect URI
  (RFC 8252 §7.3) for the one request that carries the answer;
- :class:`HeadlessSignIn` follows the authorization server's redirects itself, for servers that
  approve without a person (CI, tests, the conformance suite), each hop through the SSRF guard;
- :class:`NoSignIn` is what every other command uses: it never starts a sign-in by surprise, it
  says which command to run.
"""

from __future__ import annotations

import sys
import webbrowser
from collections.abc import Callable
from typing import Protocol
from urllib.parse import parse_qs, urljoin, urlsplit

import anyio
import httpx2
from anyio.abc import SocketStream
from mcp.shared.auth import AuthorizationCodeResult

from codemode.errors import AuthError, AuthRequiredError
from codemode.net import GuardedTransport, NetworkPolicy

__all__ = ["BrowserSignIn", "HeadlessSignIn", "NoSignIn", "SignIn", "answer_from_redirect"]

_MAX_HOPS = 10
BROWSER_WAIT_S = 300.0
"""How long a browser sign-in may take before it is given up."""


class SignIn(Protocol):
    async def authorize(self, authorization_url: str, redirect_uri: str) -> AuthorizationCodeResult:
        """The authorization server's answer, as delivered to ``redirect_uri``."""
        ...


class NoSignIn:
    """A command that is not ``auth login`` met a server that needs one."""

    def __init__(self, server: str) -> None:
        self.server = server

    async def authorize(self, authorization_url: str, redirect_uri: str) -> AuthorizationCodeResult:
        scope = parse_qs(urlsplit(authorization_url).query).get("scope")
        wanted = f" with scope {scope[0]!r}" if scope else ""
        raise AuthRequiredError(self.server, f"no valid token{wanted} in the credential store")


def _query(url: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}


def _printable(text: str, limit: int) -> str:
    # The text came from a URL anyone could have sent: no terminal escapes reach the person.
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


def answer_from_redirect(location: str) -> AuthorizationCodeResult:
    """The code/state/iss of a redirect back to the client, or the error it reports."""
    query = _query(location)
    if "error" in query:
        refusal = f"{_printable(query['error'], 64)} {_printable(query.get('error_description', ''), 200)}"
        raise AuthError(f"the authorization server refused: {refusal}".rstrip())
    if not query.get("code"):
        raise AuthError("the authorization server redirected back without a code")
    return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


def _same_endpoint(url: str, redirect_uri: str) -> bool:
    a, b = urlsplit(url), urlsplit(redirect_uri)
    return (a.scheme, a.hostname, a.port, a.path) == (b.scheme, b.hostname, b.port, b.path)


class HeadlessSignIn:
    """Follows the authorization redirects without a browser; works only where the server
    approves at once (no login page)."""

    def __init__(self, policy: NetworkPolicy, transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self._policy = policy
        self._transport = transport

    async def authorize(self, authorization_url: str, redirect_uri: str) -> AuthorizationCodeResult:
        transport = self._transport or GuardedTransport(self._policy)
        async with httpx2.AsyncClient(transport=transport, follow_redirects=False, timeout=30.0) as client:
            url = authorization_url
            for _ in range(_MAX_HOPS):
                response = await client.get(url)
                location = response.headers.get("location")
                if not response.is_redirect or not location:
                    raise AuthError(
                        f"headless sign-in stopped at a page (HTTP {response.status_code}) instead of a "
                        "redirect: this authorization server wants a person; run `codemode auth login` "
                        "without --headless"
                    )
                target = urljoin(url, location)
                try:
                    arrived = _same_endpoint(target, redirect_uri)
                except ValueError:  # a port out of range, a broken IPv6 literal
                    bad = _printable(target, 200)
                    raise AuthError(f"the authorization server redirected to a bad address: {bad}") from None
                if arrived:
                    return answer_from_redirect(target)
                url = target
        raise AuthError(f"headless sign-in gave up after {_MAX_HOPS} redirects")


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


_PAGE = (
    "<!doctype html><meta charset=utf-8><title>codemode</title>"
    "<body style='font-family:sans-serif;margin:3em'><h1>{title}</h1><p>{text}</p></body>"
)


class BrowserSignIn:
    """Opens the authorization URL in the person's browser and waits on the loopback redirect."""

    def __init__(
        self,
        *,
        open_url: Callable[[str], object] = webbrowser.open,
        announce: Callable[[str], None] | None = None,
        timeout: float = BROWSER_WAIT_S,
    ) -> None:
        self._open = open_url
        self._announce = announce or _to_stderr
        self._timeout = timeout

    async def authorize(self, authorization_url: str, redirect_uri: str) -> AuthorizationCodeResult:
        target = urlsplit(redirect_uri)
        state = _query(authorization_url).get("state")
        try:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=target.port or 80)
        except OSError as exc:
            raise AuthError(
                f"cannot listen on {redirect_uri} for the sign-in redirect ({exc.strerror}); "
                "set another [servers.NAME.oauth] redirect_port"
            ) from None
        answer: list[AuthorizationCodeResult | AuthError] = []
        async with listener:
            self._announce(
                f"Opening your browser to sign in. If it does not open, visit:\n  {authorization_url}"
            )
            with anyio.move_on_after(self._timeout):
                async with anyio.create_task_group() as group:
                    # Opening may block until the page has loaded, which needs the listener.
                    group.start_soon(self._open_quietly, authorization_url)

                    async def serve(stream: SocketStream) -> None:
                        async with stream:
                            outcome = await _callback(stream, target.path, state)
                        if outcome is not None and not answer:
                            answer.append(outcome)
                            group.cancel_scope.cancel()

                    await listener.serve(serve)  # pyright: ignore[reportArgumentType]
        if not answer:
            raise AuthError(f"no sign-in arrived within {self._timeout:g} s; run `codemode auth login` again")
        if isinstance(answer[0], AuthError):
            raise answer[0]
        return answer[0]

    async def _open_quietly(self, url: str) -> None:
        try:
            await anyio.to_thread.run_sync(self._open, url, abandon_on_cancel=True)
        except Exception:  # no browser here: the person opens the printed URL themselves
            return


async def _callback(
    stream: SocketStream, path: str, state: str | None
) -> AuthorizationCodeResult | AuthError | None:
    """Reads one HTTP request; the sign-in answer if it is the redirect of this sign-in (its
    ``state``), else None: a favicon, or a request any local process or web page could send,
    which must neither end the sign-in nor stand in for its answer."""
    data = b""
    with anyio.move_on_after(10):
        while b"\r\n\r\n" not in data and len(data) < 16384:
            chunk = await stream.receive(4096)
            if not chunk:
                break
            data += chunk
    request_line = data.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split(" ")
    try:
        ours = len(parts) == 3 and parts[0] == "GET" and urlsplit(parts[1]).path == path
    except ValueError:  # not a URL at all
        ours = False
    if not ours:
        await _respond(stream, 404, "Not found", "This address only receives codemode sign-ins.")
        return None
    if _query(parts[1]).get("state") != state:
        await _respond(stream, 400, "Not this sign-in", "codemode is waiting for another sign-in.")
        return None
    try:
        result = answer_from_redirect(parts[1])
    except AuthError as exc:
        await _respond(stream, 400, "Sign-in failed", "Return to your terminal for details.")
        return exc
    await _respond(stream, 200, "Signed in", "codemode has the sign-in. You can close this tab.")
    return result


async def _respond(stream: SocketStream, status: int, title: str, text: str) -> None:
    body = _PAGE.format(title=title, text=text).encode()
    head = (
        f"HTTP/1.1 {status} {title}\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    await stream.send(head.encode() + body)
