"""``codemode search`` and ``codemode tree`` say which step is missing when they find no tools.

Each setup state a newcomer meets (no server configured, nothing synced, tools waiting for review,
some servers ready and others not, a query that matches nothing) gets its own message and the
command to run next, in text and in ``--json``; the exit status tells "nothing to search" (1)
from "nothing matched" (0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from codemode.catalog import ServerCatalog, ToolSpec, approve, load_lock, observe, save_lock, tool_hash
from codemode.cli._main import cli

SERVERS = """
[servers.crm]
command = "never-started"

[servers.mail]
command = "never-started"
"""


def tool_spec(server: str, name: str, description: str) -> ToolSpec:
    definition: dict[str, Any] = {
        "name": name,
        "title": None,
        "description": description,
        "input_schema": {"type": "object"},
        "output_schema": None,
        "annotations": None,
    }
    return ToolSpec(server=server, schema_hash=tool_hash(**definition), **definition)


CRM = ServerCatalog(
    server="crm",
    tools=(
        tool_spec("crm", "get_customer", "Look up one customer by id."),
        tool_spec("crm", "delete_customer", "Delete a customer permanently."),
    ),
)
MAIL = ServerCatalog(server="mail", tools=(tool_spec("mail", "send_email", "Send an email to a customer."),))


@pytest.fixture
def workspace(tmp_path: Path, private_search_cache: Path) -> Path:
    del private_search_cache  # requested for its environment
    (tmp_path / "codemode.toml").write_text(SERVERS, encoding="utf-8")
    return tmp_path


def sync(workspace: Path, *catalogs: ServerCatalog, approved: tuple[str, ...] = ()) -> None:
    """What 'codemode sync' records for ``catalogs``, then 'pin --approve' for the ``approved`` servers."""
    lock_path = workspace / "codemode.lock"
    lock = load_lock(lock_path)
    for catalog in catalogs:
        lock, _ = observe(lock, catalog)
    if approved:
        lock = approve(lock, approved)[0]
    save_lock(lock_path, lock)


def invoke(workspace: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--config", str(workspace / "codemode.toml")])


def search_json(workspace: Path, query: str, status: int) -> Any:
    result = invoke(workspace, "search", query, "--json")
    assert result.exit_code == status, result.output
    return json.loads(result.stdout)


def test_no_server_configured_says_how_to_add_one(workspace: Path) -> None:
    (workspace / "codemode.toml").write_text("[sandbox]\n", encoding="utf-8")
    answer = search_json(workspace, "customer", 1)
    assert answer["results"] == [] and answer["state"] == "no-servers"
    assert "no servers are configured" in answer["error"]
    assert "[servers.time]" in answer["hint"] and 'command = "uvx"' in answer["hint"]
    assert "codemode init --force --from" in answer["hint"]
    text = invoke(workspace, "search", "customer")
    assert text.exit_code == 1 and "[servers.<name>]" in text.stderr
    tree = invoke(workspace, "tree", "--json")
    assert tree.exit_code == 0 and isinstance(json.loads(tree.stdout), list)
    assert "no servers are configured" in tree.stderr


def test_nothing_synced_says_to_sync_with_the_config_it_was_given(workspace: Path) -> None:
    answer = search_json(workspace, "customer", 1)
    assert answer["state"] == "not-synced"
    assert "crm, mail" in answer["error"]
    config = str(workspace / "codemode.toml")
    assert f"codemode sync --config {config}" in answer["hint"]
    assert f"codemode pin --approve --config {config}" in answer["hint"]
    tree = invoke(workspace, "tree", "servers/crm")
    assert tree.exit_code == 1 and "crm was never synced" in tree.stderr


def test_tools_waiting_for_review_say_how_many_and_to_pin(workspace: Path) -> None:
    sync(workspace, CRM, MAIL)
    answer = search_json(workspace, "customer", 1)
    assert answer["state"] == "not-approved"
    assert "3 tools wait for review: crm (2 tools), mail (1 tool)" in answer["error"]
    assert "'codemode pin --config" in answer["hint"] and "pin --approve" in answer["hint"]
    text = invoke(workspace, "search", "customer")
    assert text.exit_code == 1 and "no tool is approved yet" in text.stderr
    tree = invoke(workspace, "tree", "servers/mail")
    assert tree.exit_code == 1
    assert "mail has no approved tools (1 tool waits for review)" in tree.stderr
    assert "pin --approve mail" in tree.stderr


def test_a_query_that_matches_nothing_keeps_the_json_a_list_and_names_servers_not_ready(
    workspace: Path,
) -> None:
    sync(workspace, CRM, MAIL, approved=("crm",))
    assert search_json(workspace, "customer", 0), "crm's approved tools are found"
    result = invoke(workspace, "search", "zebra giraffe", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert "no tool matched" in result.stderr and "fewer or other words" in result.stderr
    assert "waiting for review: mail (1 tool)" in result.stderr
    text = invoke(workspace, "search", "zebra giraffe")
    assert text.exit_code == 0 and text.stdout.strip() == "no matching tools"
    assert "fewer or other words" in text.stderr
    tree = invoke(workspace, "tree", "servers")
    assert tree.exit_code == 0 and "crm" in tree.stdout
    assert "waiting for review: mail (1 tool)" in tree.stderr


def test_when_every_server_is_ready_a_miss_only_suggests_other_words(workspace: Path) -> None:
    sync(workspace, CRM, MAIL, approved=("crm", "mail"))
    result = invoke(workspace, "search", "zebra giraffe", "--principal", "nobody")
    assert result.exit_code == 0
    assert "fewer or other words" in result.stderr and "principal 'nobody'" in result.stderr
    assert "waiting for review" not in result.stderr and "never synced" not in result.stderr
    tree = invoke(workspace, "tree")
    assert tree.exit_code == 0 and tree.stderr == ""
