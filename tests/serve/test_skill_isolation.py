"""Over ``codemode serve`` (HTTP, bearer tokens), tenant acme's saved skill is found, listed and
read by acme's principal, and by no principal of another tenant: not through ``search_tools``
(whose answer is exactly what it was before the skill existed), ``list_files``, ``read_file``,
nor the resources it lists. A revoked skill is gone from the next search."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tests.serve.conftest import TOKENS, TOKENS_TOML, make_workspace, serving_http
from tests.skills._deployment import SKILL, skill_json

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

# eve belongs to globex; serving_http passes the "ops" token's value in CODEMODE_TEST_OPS.
GLOBEX_TOML = """
[policy.principals.eve]
tenants = ["globex"]
[serve.tokens.eve]
token = "${CODEMODE_TEST_OPS}"
principal = "eve"
tenant = "globex"
"""
QUERY = "the company name of one customer"


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("serve-skills"), TOKENS_TOML + GLOBEX_TOML)


@pytest.fixture(scope="module")
def url(config_path: Path) -> Iterator[str]:
    with serving_http(config_path) as served:
        yield served


def http(url: str, token: str) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))


async def text_of(client: Client, tool: str, **arguments: Any) -> tuple[str, bool]:
    result = await client.call_tool(tool, arguments)
    [block] = result.content
    assert isinstance(block, mcp_types.TextContent)
    return block.text, result.is_error


async def listed_resources(client: Client) -> str:
    resources = await client.list_resources()
    templates = await client.list_resource_templates()
    return resources.model_dump_json() + templates.model_dump_json()


async def test_a_skill_is_seen_over_serve_by_its_tenant_only(url: str, config_path: Path) -> None:
    async with Client(http(url, TOKENS["alice"])) as alice, Client(http(url, TOKENS["ops"])) as eve:
        eve_before = await text_of(eve, "search_tools", query=QUERY, k=10)
        eve_files = await text_of(eve, "list_files", path="")
        eve_resources = await listed_resources(eve)
        skill = config_path.parent / "customers.py"
        skill.write_text(SKILL, encoding="utf-8")
        skill_json(config_path, "add", "customers", str(skill), "--tenant", "acme")

        found, _ = await text_of(alice, "search_tools", query=QUERY, k=10)
        assert found.splitlines()[0] == "skills.customers.company: The company name of one customer."
        assert "skills/" in (await text_of(alice, "list_files", path=""))[0]
        source, is_error = await text_of(alice, "read_file", path="skills/customers.py")
        assert not is_error and source.startswith(SKILL.rstrip())

        assert await text_of(eve, "search_tools", query=QUERY, k=10) == eve_before
        full, _ = await text_of(eve, "search_tools", query=QUERY, k=10, detail="full")
        assert "skills" not in full
        assert await text_of(eve, "list_files", path="") == eve_files
        missing, is_error = await text_of(eve, "list_files", path="skills")
        assert is_error and "no such file or directory" in missing
        hidden, is_error = await text_of(eve, "read_file", path="skills/customers.py")
        assert is_error and "no such file" in hidden
        assert await listed_resources(eve) == eve_resources
        assert "customers" not in eve_resources and "skills" not in eve_resources
        with pytest.raises(MCPError, match="has no file"):
            await eve.read_resource("workspace:///skills/customers.py")

        skill_json(config_path, "revoke", "customers", "--tenant", "acme")
        after, _ = await text_of(alice, "search_tools", query=QUERY, k=10)
        assert "skills." not in after
