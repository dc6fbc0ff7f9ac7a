"""The browser sign-in, in a real browser: Chromium follows the authorization redirect back to
codemode's loopback listener, which takes the code and shows the person a closing page."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from codemode.auth import BrowserSignIn, FileCredentialStore, HostAuth
from codemode.config import config_from_mapping
from codemode.host import ConnectionState, McpHost
from tests.conftest import FIXTURE_SERVERS, HttpServers
from tests.serve._browser import chromium

pytestmark = [pytest.mark.browser, pytest.mark.anyio]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_browser_sign_in_lands_on_the_loopback_listener(
    tmp_path: Path, http_servers: HttpServers
) -> None:
    url = http_servers.start_script(FIXTURE_SERVERS / "oauth_server.py", "--port", "0")
    port = _free_port()
    config = config_from_mapping(
        {
            "servers": {
                "remote": {
                    "url": url,
                    "allow_loopback": True,
                    "reconnect": False,
                    "oauth": {"redirect_port": port},
                }
            }
        }
    )
    store = FileCredentialStore(tmp_path / "credentials.json")
    announced: list[str] = []
    pages: list[str] = []
    with chromium(tmp_path / "profile") as driver:

        def open_in_browser(address: str) -> None:
            driver.get(address)
            pages.append(driver.page_source)

        sign_in = BrowserSignIn(open_url=open_in_browser, announce=announced.append, timeout=60)
        async with McpHost(config, auth=HostAuth(store=store, sign_in=lambda _s, _c: sign_in)) as host:
            [status] = host.statuses()
    assert status.state is ConnectionState.READY, status.error
    assert status.tool_count == 2
    assert "visit:" in announced[0] and "/authorize?" in announced[0]
    assert "You can close this tab" in pages[0]
    record = store.get(url)
    assert record is not None and record.tokens is not None and record.issuer
