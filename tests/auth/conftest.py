"""The OAuth fixture server, started per test (its tokens and logs are the test's own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.auth._remote import Remote, write_workspace
from tests.conftest import FIXTURE_SERVERS, HttpServers


@pytest.fixture
def remote(tmp_path: Path, http_servers: HttpServers) -> Remote:
    tokens, headers = tmp_path / "issued.txt", tmp_path / "headers.txt"
    url = http_servers.start_script(
        FIXTURE_SERVERS / "oauth_server.py",
        "--port", "0", "--expires-in", "2", "--token-file", str(tokens), "--header-log", str(headers),
    )  # fmt: skip
    write_workspace(tmp_path, url)
    return Remote(tmp_path, url, tokens, headers)
