"""Approvals made while `codemode serve` runs take effect at the next call, with no restart:
pins (`codemode pin --approve`) and pre-issued call approvals (`codemode approve`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client

from codemode.cli._main import cli
from tests.serve.conftest import TOKENS_TOML, make_workspace, serving_http
from tests.serve.test_relay import GUARDED
from tests.serve.test_serve import WRITE, http, text_of

pytestmark = pytest.mark.integration


def test_pins_approved_while_serving_take_effect_at_the_next_call(tmp_path: Path) -> None:
    """``codemode pin --approve`` beside a running serve: no restart needed."""
    workspace = make_workspace(tmp_path, TOKENS_TOML)
    server = f"command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(GUARDED))}]\n"
    workspace.write_text(
        workspace.read_text() + f'\n[servers.guarded]\n{server}roots = ["/srv/data"]\ntrusted = true\n'
    )
    runner = CliRunner()
    synced = runner.invoke(cli, ["sync", "--config", str(workspace)])
    assert synced.exit_code == 0, synced.output  # guarded's tools are listed, and pending
    program = "from servers.guarded import roots\nroots()['result']\n"

    async def run_roots() -> str:
        async with Client(http(url), mode="legacy") as client:
            return text_of(await client.call_tool("run_code", {"code": program}))

    with serving_http(workspace) as url:
        before = anyio.run(run_roots)
        approved = runner.invoke(cli, ["pin", "--approve", "guarded", "--config", str(workspace)])
        assert approved.exit_code == 0, approved.output
        after = anyio.run(run_roots)
    assert "ModuleNotFoundError" in before, "not approved yet: no stub"
    assert after.startswith("status: ok"), after
    assert "file:///srv/data" in after


def test_a_call_approval_issued_while_serving_covers_the_next_call(workspace: Path) -> None:
    async def write() -> str:
        async with Client(http(url), mode="legacy") as client:  # a client that cannot be asked
            return text_of(await client.call_tool("run_code", {"code": WRITE}))

    arguments = json.dumps({"customer_id": "CUST-0001", "text": "approved by the test"})
    approve = ["approve", "crm/add_note", "--args", arguments, "--principal", "alice", "--tenant", "acme"]
    with serving_http(workspace) as url:
        before = anyio.run(write)
        issued = CliRunner().invoke(cli, [*approve, "--config", str(workspace)])
        assert issued.exit_code == 0, issued.output
        after = anyio.run(write)
    assert "denied by the consent gate" in before
    assert after.startswith("status: ok"), after
