"""No token passthrough: the token a client presents to ``codemode serve`` is never forwarded to
a downstream server, which sees only the token codemode obtained for it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.auth._remote import Remote, login, write_workspace
from tests.conftest import FIXTURE_SERVERS, HttpServers
from tests.serve.conftest import TOKENS, TOKENS_TOML, serving_http

pytestmark = pytest.mark.anyio


async def test_the_serve_token_never_reaches_the_downstream_server(
    tmp_path: Path, http_servers: HttpServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens, headers = tmp_path / "issued.txt", tmp_path / "headers.txt"
    url = http_servers.start_script(
        FIXTURE_SERVERS / "oauth_server.py",
        "--port", "0", "--token-file", str(tokens), "--header-log", str(headers),
    )  # fmt: skip
    write_workspace(tmp_path, url)
    remote = Remote(tmp_path, url, tokens, headers)
    remote.config.write_text(remote.config.read_text() + TOKENS_TOML)
    login(remote)
    assert remote.cli("sync").returncode == 0 and remote.cli("pin", "--approve").returncode == 0
    monkeypatch.setenv("CODEMODE_CREDENTIALS", remote.env()["CODEMODE_CREDENTIALS"])
    with serving_http(remote.config) as serve_url:
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS['alice']}"})
        async with client, Client(streamable_http_client(serve_url, http_client=client)) as session:
            result = await session.call_tool(
                "run_code", {"code": "from servers.remote import whoami\nwhoami()"}
            )
    text = "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))
    assert not result.is_error, text
    seen = [
        line.removeprefix("Bearer ") for line in headers.read_text().split("\n") if line.startswith("Bearer ")
    ]
    assert seen, "the downstream server was called with a token"
    assert TOKENS["alice"] not in headers.read_text()
    assert set(seen) <= set(remote.issued()), "only tokens its own authorization server issued"
    assert TOKENS["alice"] not in json.dumps(text)
