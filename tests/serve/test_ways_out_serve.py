"""Through ``codemode serve``: a call nobody can approve (the client cannot elicit) reaches the agent
as a tool error that names the ways out, and hints accepted with ``codemode pin --accept-hints``
while serve runs take effect at the next run, without a restart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mcp_types
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters

from codemode.cli._main import cli

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROGRAM = 'from servers.time import get_current_time\nget_current_time(timezone="UTC")["timezone"]'


def text_of(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """mcp-server-time, untrusted, synced and approved; its hints not accepted."""
    config = tmp_path / "codemode.toml"
    config.write_text(
        f'[servers.time]\ncommand = {json.dumps(sys.executable)}\nargs = ["-m", "mcp_server_time"]\n\n'
        '[sandbox]\nbackend = "process"\npool_size = 0\n',
        encoding="utf-8",
    )
    for args in (["sync"], ["pin", "--approve"]):
        result = CliRunner().invoke(cli, [*args, "--config", str(config)])
        assert result.exit_code == 0, result.output
    return config


async def test_the_agent_is_told_the_ways_out_and_an_acceptance_counts_without_a_restart(
    workspace: Path,
) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "codemode.cli", "serve", "--config", str(workspace)]
    )
    async with Client(server) as client:  # no elicitation callback: nobody can be asked
        refused = await client.call_tool("run_code", {"code": PROGRAM})
        text = text_of(refused)
        assert refused.is_error, text
        assert "needs approval: time/get_current_time is high risk (not known to be read-only)" in text
        assert "No approver is available here (the MCP client does not support elicitation)" in text
        for way in (
            "codemode pin --accept-hints time/get_current_time",
            "trusted = true under [servers.time]",
            '[policy.consent] read_only = ["time/get_current_time"]',
            """codemode approve time/get_current_time --args '{"timezone": "UTC"}'""",
        ):
            assert way in text, text

        accepted = CliRunner().invoke(
            cli, ["pin", "--accept-hints", "time/get_current_time", "--config", str(workspace)]
        )
        assert accepted.exit_code == 0, accepted.output

        allowed = await client.call_tool("run_code", {"code": PROGRAM})
        assert not allowed.is_error, text_of(allowed)
        assert '"UTC"' in text_of(allowed)
