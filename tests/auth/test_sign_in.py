"""The sign-in flows' failure paths, against listeners on 127.0.0.1: each ends in an AuthError that
says what happened, and none leaves a listener behind."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.shared.auth import AuthorizationCodeResult

from codemode.auth import BrowserSignIn, FileCredentialStore, HeadlessSignIn, NoSignIn, StoreTokenStorage
from codemode.auth._sign_in import answer_from_redirect
from codemode.errors import AuthError, AuthRequiredError
from codemode.net import NetworkPolicy

pytestmark = pytest.mark.anyio

REDIRECT = "http://127.0.0.1:33418/callback"
LOOPBACK = NetworkPolicy(allow_loopback=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _authorization_server(answers: dict[str, httpx2.Response]) -> httpx2.MockTransport:
    """An authorization server's answers by path, behind the real SSRF guard's checks."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        return answers.get(request.url.path, httpx2.Response(404))

    return httpx2.MockTransport(handle)


def test_a_redirect_carries_code_state_and_issuer() -> None:
    answer = answer_from_redirect(f"{REDIRECT}?code=c&state=s&iss=https%3A%2F%2Fas.example.test")
    assert (answer.code, answer.state, answer.iss) == ("c", "s", "https://as.example.test")


@pytest.mark.parametrize(
    ("location", "message"),
    [
        (f"{REDIRECT}?error=access_denied&error_description=nope", "refused: access_denied nope"),
        (f"{REDIRECT}?state=s", "without a code"),
        (f"{REDIRECT}?error={'x' * 5000}", "refused: " + "x" * 64),
        # Terminal escapes sent by whoever wrote the URL are not printed to the person.
        (
            f"{REDIRECT}?error=denied&error_description=%1b%5b2J%1b]0;owned%07",
            r"refused: denied \?\[2J\?\]0;owned\?$",
        ),
    ],
)
def test_a_redirect_without_a_code_is_an_error(location: str, message: str) -> None:
    with pytest.raises(AuthError, match=message) as caught:
        answer_from_redirect(location)
    assert len(str(caught.value)) < 400, "a hostile server cannot flood the message"


async def test_headless_follows_hops_until_the_redirect_uri() -> None:
    server = _authorization_server(
        {
            "/authorize": httpx2.Response(302, headers={"location": "/login"}),
            "/login": httpx2.Response(303, headers={"location": f"{REDIRECT}?code=c1&state=s1"}),
        }
    )
    answer = await HeadlessSignIn(LOOPBACK, transport=server).authorize(
        "http://127.0.0.1:9/authorize?x=1", REDIRECT
    )
    assert (answer.code, answer.state) == ("c1", "s1")


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"/authorize": httpx2.Response(200, text="<form>log in</form>")}, "stopped at a page"),
        ({"/authorize": httpx2.Response(302, headers={"location": "/authorize"})}, "gave up after 10"),
    ],
)
async def test_headless_refuses_a_server_that_wants_a_person(
    answers: dict[str, httpx2.Response], message: str
) -> None:
    with pytest.raises(AuthError, match=message):
        await HeadlessSignIn(LOOPBACK, transport=_authorization_server(answers)).authorize(
            "http://127.0.0.1:9/authorize", REDIRECT
        )


async def test_headless_names_a_redirect_to_a_malformed_address() -> None:
    server = _authorization_server(
        {"/authorize": httpx2.Response(302, headers={"location": "http://127.0.0.1:99999/x"})}
    )
    with pytest.raises(AuthError, match=r"redirected to a bad address: http://127\.0\.0\.1:99999/x"):
        await HeadlessSignIn(LOOPBACK, transport=server).authorize("http://127.0.0.1:9/authorize", REDIRECT)


async def test_headless_hops_pass_the_ssrf_guard() -> None:
    # No transport given: the guard's. Loopback is not allowed, so the first hop is refused.
    with pytest.raises(Exception, match="loopback"):
        await HeadlessSignIn(NetworkPolicy()).authorize("http://127.0.0.1:9/authorize", REDIRECT)


async def test_no_sign_in_says_which_command_to_run_and_which_scope() -> None:
    with pytest.raises(AuthRequiredError, match=r"run `codemode auth login tracker`.*scope 'read write'"):
        await NoSignIn("tracker").authorize("https://as.example.test/authorize?scope=read+write", REDIRECT)


@pytest.fixture
def redirect_uri() -> str:
    return f"http://127.0.0.1:{_free_port()}/callback"


async def _browser(redirect_uri: str, path: str) -> str:
    """What the loopback listener answers a browser that lands on ``path``."""
    async with httpx2.AsyncClient() as browser:
        for _ in range(100):
            try:
                return (await browser.get(redirect_uri.replace("/callback", path))).text
            except httpx2.ConnectError:
                await anyio.sleep(0.02)
    raise AssertionError("the listener never came up")


async def _raw(redirect_uri: str, request: bytes) -> bytes:
    """What the listener answers ``request``, sent as is."""
    port = int(redirect_uri.split(":")[2].split("/")[0])
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        return await stream.receive()


@pytest.mark.integration
async def test_the_browser_listener_ignores_strays_and_takes_the_redirect(redirect_uri: str) -> None:
    opened: list[str] = []
    pages: list[str] = []
    authorization_url = "https://as.example.test/authorize?client_id=c&state=s"

    async def browse() -> None:
        pages.append(await _browser(redirect_uri, "/favicon.ico"))
        # Anyone on this machine, or a web page in the person's browser, can reach the listener:
        # neither a refusal nor a code of another flow ends this sign-in, nor does a broken request.
        pages.append(await _browser(redirect_uri, "/callback?error=access_denied&state=forged"))
        pages.append(await _browser(redirect_uri, "/callback?code=planted"))
        pages.append((await _raw(redirect_uri, b"GET http://[::1/callback HTTP/1.1\r\n\r\n")).decode())
        pages.append(await _browser(redirect_uri, "/callback?code=c&state=s"))

    sign_in = BrowserSignIn(open_url=opened.append, announce=lambda _text: None, timeout=30)
    answers: list[AuthorizationCodeResult] = []
    async with anyio.create_task_group() as group:
        group.start_soon(browse)
        answers.append(await sign_in.authorize(authorization_url, redirect_uri))
    assert [(a.code, a.state) for a in answers] == [("c", "s")]
    assert opened == [authorization_url]
    assert "only receives codemode sign-ins" in pages[0] and "close this tab" in pages[-1]
    assert all("waiting for another sign-in" in page for page in pages[1:3]), pages
    assert "404" in pages[3]
    with socket.socket() as again:  # the listener is gone (SO_REUSEADDR: only a listener blocks)
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", int(redirect_uri.split(":")[2].split("/")[0])))


@pytest.mark.integration
async def test_a_refusal_arriving_in_the_browser_is_an_error(redirect_uri: str) -> None:
    async def browse() -> None:
        await _browser(redirect_uri, "/callback?error=access_denied&state=s")

    sign_in = BrowserSignIn(open_url=lambda _url: None, announce=lambda _text: None, timeout=30)
    async with anyio.create_task_group() as group:
        group.start_soon(browse)
        with pytest.raises(AuthError, match="refused: access_denied"):
            await sign_in.authorize("https://as.example.test/authorize?state=s", redirect_uri)


@pytest.mark.integration
async def test_a_browser_that_never_comes_back_times_out(redirect_uri: str) -> None:
    sign_in = BrowserSignIn(open_url=lambda _url: None, announce=lambda _text: None, timeout=0.3)
    with pytest.raises(AuthError, match=r"no sign-in arrived within 0\.3 s"):
        await sign_in.authorize("https://as.example.test/authorize", redirect_uri)


@pytest.mark.integration
async def test_a_busy_redirect_port_says_which_setting_to_change(redirect_uri: str) -> None:
    port = int(redirect_uri.split(":")[2].split("/")[0])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        sign_in = BrowserSignIn(open_url=lambda _url: None, announce=lambda _text: None, timeout=1)
        with pytest.raises(AuthError, match="redirect_port"):
            await sign_in.authorize("https://as.example.test/authorize", redirect_uri)


async def test_login_asks_for_a_scope_a_call_was_refused_for(tmp_path: Path) -> None:
    storage = StoreTokenStorage(FileCredentialStore(tmp_path / "c.json"), "https://mcp.example.test/mcp", "x")
    # A step-up in `codemode run` (which cannot sign in) leaves its scope behind ...
    storage.remember_scope("https://as.example.test/authorize?client_id=c&scope=read+write")
    # ... and the next sign-in, started by a challenge for `read` only, asks for both.
    url = storage.remember_scope("https://as.example.test/authorize?client_id=c&scope=read&state=s")
    assert httpx2.URL(url).params.get("scope") == "read write"
    assert httpx2.URL(url).params.get("state") == "s"
    untouched = "https://as.example.test/authorize?client_id=c"
    fresh = StoreTokenStorage(FileCredentialStore(tmp_path / "d.json"), "https://mcp.example.test/mcp", "x")
    assert fresh.remember_scope(untouched) == untouched, "no scope asked, none invented"
