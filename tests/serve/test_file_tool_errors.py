"""`codemode serve`'s navigation tools refuse bad input as the tool's error, with the reason.

A refusal the tree expects (a path with '..', an absolute path, a file that is not there or that
the caller may not see, a directory given to read_file) must reach the client as an ``isError``
result that says why, and must not be logged by serve as a crash (a traceback on stderr)."""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.serve.conftest import make_workspace
from tests.serve.test_serve import text_of

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

# Over stdio the caller is [serve] principal: alice, who may use the tickets server only.
ALICE_SEES_TICKETS_ONLY = """
[policy.principals.alice]
tools = ["tickets/*"]
"""

REFUSED: list[tuple[str, dict[str, str], str]] = [
    ("read_file", {"path": "../codemode.toml"}, "'../codemode.toml': '..' is not allowed in tree paths"),
    ("read_file", {"path": "servers/../../etc/passwd"}, "'..' is not allowed in tree paths"),
    ("read_file", {"path": "/etc/passwd"}, "'/etc/passwd': paths are relative to the tree root and use '/'"),
    ("read_file", {"path": "C:/windows/win.ini"}, "paths are relative to the tree root and use '/'"),
    ("read_file", {"path": "servers\\tickets\\list_tickets.py"}, "paths are relative to the tree root"),
    ("read_file", {"path": "servers/tickets/nope.py"}, "'servers/tickets/nope.py': no such file in the tree"),
    # crm exists, but not for alice: it looks exactly like a file that is not there.
    ("read_file", {"path": "servers/crm/get_customer.py"}, "'servers/crm/get_customer.py': no such file"),
    ("read_file", {"path": "servers/tickets"}, "'servers/tickets': is a directory; use list()"),
    ("read_file", {"path": ""}, "'': is a directory; use list()"),
    ("list_files", {"path": ".."}, "'..': '..' is not allowed in tree paths"),
    ("list_files", {"path": "/"}, "'/': paths are relative to the tree root and use '/'"),
    ("list_files", {"path": "servers/crm"}, "'servers/crm': no such file or directory in the tree"),
    ("list_files", {"path": "servers/nowhere"}, "'servers/nowhere': no such file or directory in the tree"),
]


@asynccontextmanager
async def serving(workspace: Path, errlog: Path) -> AsyncGenerator[Client]:
    """A client of ``codemode serve`` over stdio (verbose, so INFO logs show too), whose stderr
    goes to ``errlog``."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "codemode.cli", "serve", "-v", "--config", str(workspace)]
    )
    with errlog.open("w", encoding="utf-8") as sink:
        async with Client(stdio_client(params, errlog=sink)) as client:
            yield client


def assert_no_crash_logged(errlog: Path) -> None:
    log = errlog.read_text(encoding="utf-8")
    assert "Traceback" not in log and "unexpected exception" not in log, log[-2000:]


@pytest.fixture(scope="module")
def alice_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = make_workspace(tmp_path_factory.mktemp("file-tools"), ALICE_SEES_TICKETS_ONLY)
    text = config.read_text()
    assert "\n[serve]\n" not in text, "the demo config grew a [serve] table: set principal inside it"
    config.write_text(text + '\n[serve]\nprincipal = "alice"\n')
    return config


async def test_refused_paths_reach_the_client_with_their_reason_and_no_traceback(
    alice_workspace: Path, tmp_path: Path
) -> None:
    errlog = tmp_path / "serve-stderr.log"
    async with serving(alice_workspace, errlog) as client:
        for tool, arguments, reason in REFUSED:
            result = await client.call_tool(tool, arguments)
            text = text_of(result)
            assert result.is_error, f"{tool}({arguments}) was not refused: {text[:200]}"
            assert reason in text, f"{tool}({arguments}): the client saw {text!r}"
            assert "Error executing tool" not in text, "the reason is the whole answer"
        # What alice may see still works, in the same session after the refusals.
        listed = await client.call_tool("list_files", {"path": "servers"})
        assert not listed.is_error and "servers/tickets/" in text_of(listed)
        assert "crm" not in text_of(listed), "alice must not learn that crm exists"
        stub = await client.call_tool("read_file", {"path": "servers/tickets/list_tickets.py"})
        assert not stub.is_error and "def list_tickets(" in text_of(stub)
        one = await client.call_tool("list_files", {"path": "servers/tickets/list_tickets.py"})
        assert not one.is_error and text_of(one).startswith("servers/tickets/list_tickets.py")
    assert_no_crash_logged(errlog)


async def test_search_tools_refuses_bad_arguments_with_the_reason(
    alice_workspace: Path, tmp_path: Path
) -> None:
    errlog = tmp_path / "serve-stderr.log"
    async with serving(alice_workspace, errlog) as client:
        bad_detail = await client.call_tool("search_tools", {"query": "tickets", "detail": "everything"})
        assert bad_detail.is_error and "'name', 'summary' or 'full'" in text_of(bad_detail)
        for k in (0, 51, "five"):
            bad_k = await client.call_tool("search_tools", {"query": "tickets", "k": k})
            assert bad_k.is_error and "\nk\n" in text_of(bad_k), text_of(bad_k)
        no_query = await client.call_tool("search_tools", {})
        assert no_query.is_error and "\nquery\n  Field required" in text_of(no_query), text_of(no_query)
        for query in ("", "   "):
            empty = await client.call_tool("search_tools", {"query": query})
            assert not empty.is_error and text_of(empty) == "no matching tools", text_of(empty)
        # Only tools alice may see are found.
        found = await client.call_tool("search_tools", {"query": "customer name", "k": 50})
        assert not found.is_error and "servers.crm" not in text_of(found)
    assert_no_crash_logged(errlog)
