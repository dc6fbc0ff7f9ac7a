"""``codemode workspace ls|get|rm|prune``: for people, with --json, readable errors, and whose."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from codemode.cli._main import cli
from codemode.config import load_config
from codemode.workspace import WorkspaceKey
from tests.workspace._stores import configured_store

CONFIG = """\
[workspace]
ttl_s = 3600

[policy]
mode = "deny"
default_principal = "alice"

[policy.principals.alice]
tenants = ["acme"]

[policy.principals.bob]
tenants = ["acme", "globex"]
"""

ALICE = WorkspaceKey("acme", "alice")
BOB_GLOBEX = WorkspaceKey("globex", "bob")


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "codemode.toml"
    path.write_text(CONFIG)
    with configured_store(load_config(path)) as store:
        store.commit(ALICE, {"notes.txt": b"hello", "out/data.bin": b"\xff\x00"})
        store.commit(BOB_GLOBEX, {"bob.txt": b"bob's"})
        store.commit(WorkspaceKey("acme", "alice", "ses_1"), {"in-session.txt": b"s"})
    return path


def invoke(config_path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["workspace", *args, "--config", str(config_path)], catch_exceptions=False)


def test_ls_lists_the_default_principals_files(config_path: Path) -> None:
    result = invoke(config_path, "ls")
    assert result.exit_code == 0, result.output
    assert "notes.txt" in result.output and "out/data.bin" in result.output
    assert "bob.txt" not in result.output and "in-session.txt" not in result.output


def test_ls_json_names_the_workspace_and_each_file(config_path: Path) -> None:
    result = invoke(config_path, "ls", "--principal", "bob", "--tenant", "globex", "--json")
    assert json.loads(result.output) == {
        "workspace": {"tenant": "globex", "principal": "bob", "session": None},
        "files": [{"path": "bob.txt", "bytes": 5}],
    }
    session = json.loads(invoke(config_path, "ls", "--session", "ses_1", "--json").output)
    assert session["files"] == [{"path": "in-session.txt", "bytes": 1}]


def test_ls_all_lists_workspaces_and_filters_by_tenant(config_path: Path) -> None:
    every = json.loads(invoke(config_path, "ls", "--all", "--json").output)
    assert {(w["tenant"], w["principal"], w["session"]) for w in every} == {
        ("acme", "alice", None),
        ("acme", "alice", "ses_1"),
        ("globex", "bob", None),
    }
    globex = json.loads(invoke(config_path, "ls", "--all", "--tenant", "globex", "--json").output)
    assert [(w["principal"], w["files"], w["bytes"]) for w in globex] == [("bob", 1, 5)]


def test_get_prints_a_file_or_its_json(config_path: Path, tmp_path: Path) -> None:
    assert invoke(config_path, "get", "notes.txt").output == "hello"
    as_json = json.loads(invoke(config_path, "get", "out/data.bin", "--json").output)
    assert as_json == {"path": "out/data.bin", "bytes": 2, "text": None, "base64": "/wA="}
    target = tmp_path / "copy.bin"
    assert invoke(config_path, "get", "out/data.bin", "-o", str(target)).exit_code == 0
    assert target.read_bytes() == b"\xff\x00"


def test_get_of_a_missing_or_traversing_path_is_a_readable_error(config_path: Path) -> None:
    missing = invoke(config_path, "get", "nope.txt")
    assert missing.exit_code == 2
    assert "has no file 'nope.txt'" in missing.output and "codemode workspace ls" in missing.output
    escape = invoke(config_path, "get", "../../codemode.toml")
    assert escape.exit_code == 2
    assert "may not leave /workspace" in escape.output
    # Another principal's file is not in alice's workspace.
    assert invoke(config_path, "get", "bob.txt").exit_code == 2


def test_an_unknown_principal_needs_its_tenant_named(config_path: Path) -> None:
    result = invoke(config_path, "ls", "--principal", "mallory")
    assert result.exit_code == 2
    assert "unknown principal 'mallory'" in result.output
    assert invoke(config_path, "ls", "--principal", "mallory", "--tenant", "acme").exit_code == 0


def test_rm_removes_files_or_the_whole_workspace(config_path: Path) -> None:
    removed = json.loads(invoke(config_path, "rm", "notes.txt", "--json").output)
    assert removed == {"removed": ["notes.txt"], "missing": []}
    with configured_store(load_config(config_path)) as store:
        assert store.listing(ALICE) == {"out/data.bin": 2}
        again = invoke(config_path, "rm", "notes.txt")
        assert again.exit_code == 1 and "has no 'notes.txt'" in again.output
        assert invoke(config_path, "rm").exit_code == 1  # neither files nor --all
        assert invoke(config_path, "rm", "--all").exit_code == 0
        assert store.listing(ALICE) == {}
        assert store.listing(BOB_GLOBEX) == {"bob.txt": 5}


def test_prune_removes_what_the_ttl_says(config_path: Path) -> None:
    # Alice's workspace was last written two hours ago (the ledger's table says so).
    with configured_store(load_config(config_path), clock=lambda: time.time() - 7200) as store:
        store.commit(ALICE, {"old.txt": b"1"})
    result = json.loads(invoke(config_path, "prune", "--json").output)
    assert [(w["tenant"], w["principal"]) for w in result["removed"]] == [("acme", "alice")]
    assert result["ttl_s"] == 3600
    text = invoke(config_path, "prune").output
    assert "0 workspace(s) unused for more than 3600 s removed" in text


def test_ls_says_which_files_are_missing_and_which_folders_the_ledger_does_not_list(
    config_path: Path,
) -> None:
    root = load_config(config_path).workspace_root
    for version in (root / ALICE.digest).iterdir():
        version.rename(root.parent / "moved-away")
    (root / ("f" * 32)).mkdir()
    every = invoke(config_path, "ls", "--all")
    assert every.exit_code == 0, every.output
    assert "acme/alice: 2 file(s), 7 bytes, last used" in every.output
    assert f"its files are not in {root}" in every.output
    assert f"{root / ('f' * 32)} is not in the ledger's workspaces" in every.output
    listed = json.loads(invoke(config_path, "ls", "--all", "--json").stdout)
    assert {(w["principal"], w["session"], w["files_missing"]) for w in listed} == {
        ("alice", None, True),
        ("alice", "ses_1", False),
        ("bob", None, False),
    }
    mine = invoke(config_path, "ls")
    assert mine.exit_code == 2 and "workspace rm --all" in mine.output
    assert invoke(config_path, "rm", "--all").exit_code == 0
    assert (root.parent / "moved-away" / "notes.txt").read_bytes() == b"hello", "nothing else is lost"
    assert "acme/alice:" not in invoke(config_path, "ls", "--all").output


def test_workspace_commands_never_create_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "codemode.toml"
    path.write_text(CONFIG)
    ledger = load_config(path).ledger_location()
    listing = invoke(path, "ls", "--json")
    assert listing.exit_code == 0, listing.output
    assert json.loads(listing.output)["files"] == []
    assert json.loads(invoke(path, "ls", "--all", "--json").output) == []
    assert invoke(path, "get", "notes.txt").exit_code != 0
    assert invoke(path, "prune").exit_code == 0
    assert not Path(str(ledger)).exists()
