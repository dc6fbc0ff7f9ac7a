"""``codemode search`` answers from codemode.lock through a cached index, and never serves a stale one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import codemode.stubs
from codemode.catalog import ServerCatalog, ToolSpec, approve, load_lock, observe, save_lock, tool_hash
from codemode.cli._main import cli
from codemode.search import cache_dir

CONFIG = """
[servers.crm]
command = "never-started"

[servers.mail]
command = "never-started"

[policy.principals.clerk]
tools = ["crm/*"]
deny_tools = ["crm/delete_customer"]
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


def approve_catalogs(workspace: Path, *catalogs: ServerCatalog) -> None:
    lock_path = workspace / "codemode.lock"
    lock = load_lock(lock_path)
    for catalog in catalogs:
        lock, _ = observe(lock, catalog)
    save_lock(lock_path, approve(lock)[0])


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
    (tmp_path / "codemode.toml").write_text(CONFIG, encoding="utf-8")
    approve_catalogs(tmp_path, CRM, MAIL)
    return tmp_path


def search(workspace: Path, *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(
        cli, ["search", *args, "--json", "--config", str(workspace / "codemode.toml")]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _no_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("the stub tree was rendered although the cache was current")

    monkeypatch.setattr(codemode.stubs, "render_tree", refuse)


def test_a_repeated_search_is_answered_from_the_cache_with_the_same_results(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = search(workspace, "remove a customer")
    assert first[0]["module"] == "servers.crm.delete_customer"
    assert list(cache_dir().glob("*.bin"))
    _no_rendering(monkeypatch)
    assert search(workspace, "remove a customer") == first
    named = search(workspace, "remove a customer", "--detail", "name")
    assert [hit["text"] for hit in named] == [hit["module"] for hit in first]


def test_the_cached_answer_matches_the_uncached_one(workspace: Path) -> None:
    queries = ("email a customer", "look up customer", "send_email")
    fresh = [search(workspace, q, "--k", "3") for q in queries]
    cached = [search(workspace, q, "--k", "3") for q in queries]
    assert cached == fresh
    for entry in cache_dir().glob("*.bin"):
        entry.unlink()
    assert [search(workspace, q, "--k", "3") for q in queries] == fresh


def test_approving_a_new_tool_is_seen_by_the_next_search(workspace: Path) -> None:
    assert all(hit["tool"] != "archive_email" for hit in search(workspace, "archive an email"))
    approve_catalogs(
        workspace,
        ServerCatalog(server="mail", tools=(*MAIL.tools, tool_spec("mail", "archive_email", "Archive."))),
    )
    assert search(workspace, "archive an email")[0]["tool"] == "archive_email"


def test_a_principal_never_gets_another_principals_cached_index(workspace: Path) -> None:
    clerk = {hit["tool"] for hit in search(workspace, "delete customer", "--principal", "clerk")}
    everyone = {hit["tool"] for hit in search(workspace, "delete customer")}
    assert "delete_customer" not in clerk
    assert "send_email" not in clerk  # mail is not granted to the clerk at all
    assert "delete_customer" in everyone


def test_an_entry_others_could_write_or_a_damaged_one_is_rebuilt(workspace: Path) -> None:
    first = search(workspace, "look up customer")
    [entry] = cache_dir().glob("*.bin")
    entry.chmod(0o666)
    assert search(workspace, "look up customer") == first
    assert entry.stat().st_mode & 0o022 == 0  # replaced by a private entry
    entry.write_bytes(b"garbage")
    entry.chmod(0o600)
    assert search(workspace, "look up customer") == first
    assert entry.read_bytes() != b"garbage"
