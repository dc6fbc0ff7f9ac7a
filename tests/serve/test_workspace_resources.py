"""``codemode serve`` shows each caller its own workspace files as MCP resources, and a
``run_code`` answer links the files its run wrote."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from codemode.config import load_config
from codemode.serve._workspace_resources import resource_uri
from codemode.workspace import WorkspaceKey
from tests.serve.conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http
from tests.workspace._stores import configured_store

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

WRITE = (
    "import os\n"
    "open(os.path.join(os.environ['CODEMODE_WORKSPACE'], 'report.txt'), 'w').write(WHO)\n"
    "os.makedirs(os.path.join(os.environ['CODEMODE_WORKSPACE'], 'data'), exist_ok=True)\n"
    "open(os.path.join(os.environ['CODEMODE_WORKSPACE'], 'data', 'raw.bin'), 'wb').write(b'\\xff\\x00')\n"
    "'done'\n"
)


def http(url: str, who: str) -> Any:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"}
    return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("serve-workspace"), TOKENS_TOML)


@pytest.fixture(scope="module")
def url(config_path: Path) -> Iterator[str]:
    with serving_http(config_path) as served:
        yield served


def uris(listed: mcp_types.ListResourcesResult) -> set[str]:
    return {str(resource.uri) for resource in listed.resources if str(resource.uri).startswith("workspace:")}


async def run(client: Client, who: str, **arguments: Any) -> mcp_types.CallToolResult:
    code = f"WHO = {who!r}\n" + WRITE
    return await client.call_tool("run_code", {"code": code, **arguments})


async def test_a_run_links_the_files_it_wrote_and_the_caller_lists_and_reads_them(url: str) -> None:
    async with Client(http(url, "alice")) as alice:
        result = await run(alice, "alice")
        assert not result.is_error
        links = [block for block in result.content if isinstance(block, mcp_types.ResourceLink)]
        assert {str(link.uri) for link in links} == {"workspace:///report.txt", "workspace:///data/raw.bin"}
        assert result.structured_content is not None
        assert result.structured_content["workspace_written"] == ["data/raw.bin", "report.txt"]
        assert {"workspace:///report.txt", "workspace:///data/raw.bin"} <= uris(await alice.list_resources())
        text = (await alice.read_resource("workspace:///report.txt")).contents[0]
        assert isinstance(text, mcp_types.TextResourceContents) and text.text == "alice"
        blob = (await alice.read_resource("workspace:///data/raw.bin")).contents[0]
        assert isinstance(blob, mcp_types.BlobResourceContents) and blob.blob == "/wA="
        # Unchanged files are not linked again by the next run.
        again = await alice.call_tool("run_code", {"code": "1"})
        assert not any(isinstance(block, mcp_types.ResourceLink) for block in again.content)


async def test_another_principal_or_tenant_never_sees_them(url: str, config_path: Path) -> None:
    # A file of alice in another tenant: the same principal name, not the same workspace.
    with configured_store(load_config(config_path)) as store:
        store.commit(WorkspaceKey("globex", "alice"), {"globex-secret.txt": b"no"})
    async with Client(http(url, "alice")) as alice, Client(http(url, "bob")) as bob:
        await run(alice, "alice")
        assert "workspace:///globex-secret.txt" not in uris(await alice.list_resources())
        assert uris(await bob.list_resources()) == set()
        with pytest.raises(MCPError, match=r"has no file 'report\.txt'"):
            await bob.read_resource("workspace:///report.txt")
        await run(bob, "bob")
        mine = (await bob.read_resource("workspace:///report.txt")).contents[0]
        assert isinstance(mine, mcp_types.TextResourceContents) and mine.text == "bob"
        hers = (await alice.read_resource("workspace:///report.txt")).contents[0]
        assert isinstance(hers, mcp_types.TextResourceContents) and hers.text == "alice"


async def test_a_sessions_files_have_their_own_uris(url: str) -> None:
    async with Client(http(url, "alice")) as alice:
        result = await run(alice, "alice in s1", session_id="s1")
        links = {str(b.uri) for b in result.content if isinstance(b, mcp_types.ResourceLink)}
        assert resource_uri("report.txt", "s1") in links
        assert resource_uri("report.txt", "s1") in uris(await alice.list_resources())
        read = (await alice.read_resource(resource_uri("report.txt", "s1"))).contents[0]
        assert isinstance(read, mcp_types.TextResourceContents) and read.text == "alice in s1"


async def test_bad_workspace_uris_are_refused_with_a_reason(url: str) -> None:
    async with Client(http(url, "alice")) as alice:
        for uri, reason in (
            ("workspace:///../codemode.toml", "may not leave /workspace"),
            ("workspace://elsewhere/report.txt", "expected workspace:///<path>"),
            ("workspace:///report.txt?principal=bob", "takes only"),
        ):
            with pytest.raises(MCPError, match=reason):
                await alice.read_resource(uri)


async def test_the_stdio_caller_reads_its_own_workspace(config_path: Path) -> None:
    default = load_config(config_path).policy
    principal, tenant = default.identity(None, None)
    with configured_store(load_config(config_path)) as store:
        store.commit(WorkspaceKey(tenant, principal), {"stdio.txt": b"local"})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "codemode.cli", "serve", "--config", str(config_path)]
    )
    async with Client(params) as client:
        assert "workspace:///stdio.txt" in uris(await client.list_resources())
        read = (await client.read_resource("workspace:///stdio.txt")).contents[0]
        assert isinstance(read, mcp_types.TextResourceContents) and read.text == "local"


LEAKY = (
    "import os\n"
    "root = os.environ['CODEMODE_WORKSPACE']\n"
    "token = 'ghp_' + 'a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8'\n"
    "open(os.path.join(root, 'notes.txt'), 'w').write('the token is ' + token)\n"
    "open(os.path.join(root, 'dump.bin'), 'wb').write(b'\\xff\\x00' + token.encode())\n"
    "open(os.path.join(root, token + '.txt'), 'w').write('named after it')\n"
    "'done'\n"
)


async def test_a_file_leaves_through_the_result_filter_like_the_final_result(url: str) -> None:
    async with Client(http(url, "alice")) as alice:
        result = await alice.call_tool("run_code", {"code": LEAKY, "session_id": "leaky"})
        assert not result.is_error
        assert "ghp_" not in result.model_dump_json(), "the run's answer names no file after the token"
        listed = uris(await alice.list_resources())
        assert "workspace:///notes.txt?session=leaky" in listed
        assert not any("ghp_" in uri for uri in listed), listed

        notes = (await alice.read_resource("workspace:///notes.txt?session=leaky")).contents[0]
        assert isinstance(notes, mcp_types.TextResourceContents)
        assert "ghp_" not in notes.text and notes.text.startswith("the token is ")

        with pytest.raises(MCPError, match="may hold a secret"):
            await alice.read_resource("workspace:///dump.bin?session=leaky")
