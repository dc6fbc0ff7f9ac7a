"""``codemode serve`` with a server that did not start: it says so at start without ``-v``, and
an agent whose program imports that server is told why it is not there (not only
``ModuleNotFoundError``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.serve.conftest import make_workspace, serving_http
from tests.serve.test_serve import http, text_of

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

NOMOD = f"""
[servers.nomod]
command = {json.dumps(sys.executable)}
args = ["-m", "mcp_server_tme"]
"""
LOGGED = 'WARNING:codemode:server "nomod" did not start: the server process exited'
WHY = "on stderr it said: " + sys.executable + ": No module named mcp_server_tme"
PROGRAM = "from servers.nomod import get_current_time\nget_current_time(timezone='UTC')"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = make_workspace(tmp_path_factory.mktemp("serve-down"))  # synced and approved first
    config.write_text(config.read_text() + NOMOD)
    return config


def assert_told_why(text: str) -> None:
    assert 'server "nomod" is down: the server process exited' in text and WHY in text, text


async def test_serve_http_logs_the_failure_before_it_is_ready_and_the_agent_learns_why(
    workspace: Path, tmp_path: Path
) -> None:
    log = tmp_path / "serve-stderr.log"
    with serving_http(workspace, stderr_copy=log) as url:
        lines = log.read_text(encoding="utf-8").splitlines()
        [logged] = [i for i, line in enumerate(lines) if line.startswith(LOGGED)]
        assert WHY in lines[logged]
        ready = next(i for i, line in enumerate(lines) if line.startswith("READY "))
        assert logged < ready, "said at start, before any client is served"
        async with Client(http(url, token=None)) as client:
            result = await client.call_tool("run_code", {"code": PROGRAM})
    assert result.is_error
    assert_told_why(text_of(result))


async def test_serve_stdio_logs_the_failure_without_verbose_and_the_agent_learns_why(
    workspace: Path, tmp_path: Path
) -> None:
    errlog = tmp_path / "serve-stderr.log"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "codemode.cli", "serve", "--config", str(workspace)]
    )
    with errlog.open("w", encoding="utf-8") as sink:
        async with Client(stdio_client(params, errlog=sink)) as client:
            result = await client.call_tool("run_code", {"code": PROGRAM})
    assert result.is_error
    assert_told_why(text_of(result))
    [logged] = [line for line in errlog.read_text(encoding="utf-8").splitlines() if line.startswith(LOGGED)]
    assert WHY in logged
