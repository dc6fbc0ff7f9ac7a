"""``codemode search`` / ``tree`` rank as ``[search] semantic`` says, and cache hybrid indexes too.

These use the real bundled model (the ``semantic`` extra, installed in development and CI); they skip
without it, except the test of what happens when it is missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import codemode.stubs
from codemode.catalog import ServerCatalog
from codemode.cli._main import cli
from codemode.search import _ranking, cache_dir, load_embedder
from codemode.stubs import _tree_search
from tests.search.test_search_cli import CRM, MAIL, approve_catalogs, tool_spec

SERVERS = """
[servers.crm]
command = "never-started"

[servers.mail]
command = "never-started"
"""


def _configure(workspace: Path, semantic: str) -> None:
    text = SERVERS + f'\n[search]\nsemantic = "{semantic}"\n'
    (workspace / "codemode.toml").write_text(text, encoding="utf-8")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CODEMODE_CACHE_DIR", raising=False)
    monkeypatch.delenv("CODEMODE_SEARCH_SEMANTIC", raising=False)
    monkeypatch.setattr(_tree_search, "_embeddings", None)  # vectors cached under this test's folder
    _configure(tmp_path, "on")
    approve_catalogs(tmp_path, CRM, MAIL)
    return tmp_path


@pytest.fixture
def model() -> None:
    if load_embedder() is None:
        pytest.skip("the semantic extra (wordllama) is not installed")


class Renders:
    """Counts stub-tree renderings: a search answered from the cache renders nothing."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.settings: list[object] = []
        real = codemode.stubs.render_tree

        def counting(*args: Any, **kwargs: Any) -> codemode.stubs.VirtualTree:
            self.settings.append(kwargs.get("semantic"))
            return real(*args, **kwargs)

        monkeypatch.setattr(codemode.stubs, "render_tree", counting)

    @property
    def count(self) -> int:
        return len(self.settings)


def run(workspace: Path, *args: str) -> Any:
    result = CliRunner().invoke(cli, [*args, "--json", "--config", str(workspace / "codemode.toml")])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rankers(workspace: Path, query: str = "remove a customer") -> set[str]:
    return {hit["ranker"] for hit in run(workspace, "search", query)}


def entries() -> list[Path]:
    return sorted(cache_dir().glob("*.bin"))


@pytest.mark.usefixtures("model")
def test_the_setting_chooses_the_ranker_and_the_environment_overrides_it(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert rankers(workspace) == {"hybrid"}
    _configure(workspace, "off")
    assert rankers(workspace) == {"bm25"}
    _configure(workspace, "auto")
    assert rankers(workspace) == {"hybrid"}  # the extra is installed
    monkeypatch.setenv("CODEMODE_SEARCH_SEMANTIC", "off")
    assert rankers(workspace) == {"bm25"}
    _configure(workspace, "off")
    monkeypatch.setenv("CODEMODE_SEARCH_SEMANTIC", "1")
    assert rankers(workspace) == {"hybrid"}


@pytest.mark.usefixtures("model")
def test_a_hybrid_search_is_answered_from_the_cache_without_rendering(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renders = Renders(monkeypatch)
    first = run(workspace, "search", "remove a customer")
    assert first[0]["module"] == "servers.crm.delete_customer"
    assert renders.count == 1
    [entry] = entries()
    written = entry.stat().st_mtime_ns
    assert run(workspace, "search", "remove a customer") == first
    assert run(workspace, "search", "email somebody", "--k", "1")[0]["tool"] == "send_email"
    assert renders.count == 1  # answered from the entry: nothing rendered, nothing embedded again
    assert entry.stat().st_mtime_ns == written


@pytest.mark.usefixtures("model")
def test_the_cached_hybrid_answer_matches_a_fresh_one(workspace: Path) -> None:
    queries = ("email a customer", "look up customer", "send_email", "wipe out a client record")
    fresh = [run(workspace, "search", q, "--k", "3") for q in queries]
    cached = [run(workspace, "search", q, "--k", "3") for q in queries]
    assert cached == fresh
    assert {hit["ranker"] for hits in fresh for hit in hits} == {"hybrid"}


@pytest.mark.usefixtures("model")
def test_changing_the_lock_or_the_setting_names_another_entry(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renders = Renders(monkeypatch)
    run(workspace, "search", "archive an email")
    hybrid_entries = entries()
    _configure(workspace, "off")
    run(workspace, "search", "archive an email")
    assert renders.count == 2 and len(entries()) == 2  # BM25 is cached beside, not over, hybrid
    _configure(workspace, "on")
    run(workspace, "search", "archive an email")
    assert renders.count == 2 and entries() == sorted({*hybrid_entries, *entries()})
    approve_catalogs(
        workspace,
        ServerCatalog(server="mail", tools=(*MAIL.tools, tool_spec("mail", "archive_email", "Archive."))),
    )
    assert run(workspace, "search", "archive an email")[0]["tool"] == "archive_email"
    assert renders.count == 3 and len(entries()) == 3


@pytest.mark.usefixtures("model")
@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_damaged_hybrid_entry_is_ignored_and_rebuilt(workspace: Path, damage: str) -> None:
    first = run(workspace, "search", "look up customer")
    [entry] = entries()
    data = entry.read_bytes()
    damaged = {"truncate": data[: len(data) - 100], "garbage": b"\x00garbage" * 50, "empty": b""}[damage]
    entry.write_bytes(damaged)
    assert run(workspace, "search", "look up customer") == first
    assert entry.read_bytes() == data  # rebuilt whole


@pytest.mark.usefixtures("model")
def test_tree_renders_with_the_setting_in_force(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renders = Renders(monkeypatch)
    listed = run(workspace, "tree", "servers/crm")
    assert {entry["name"] for entry in listed} >= {"get_customer.py", "delete_customer.py"}
    monkeypatch.setenv("CODEMODE_SEARCH_SEMANTIC", "no")
    run(workspace, "tree", "servers/crm")
    assert renders.settings == ["on", "off"]


def test_on_without_the_extra_says_how_to_install_it_and_ranks_with_bm25(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The only stand-in here: the extra's absence, which the installed environment cannot show.
    monkeypatch.setattr(_ranking, "load_embedder", lambda setting="on": None)
    result = CliRunner().invoke(
        cli, ["search", "remove a customer", "--json", "--config", str(workspace / "codemode.toml")]
    )
    assert result.exit_code == 0, result.output
    assert {hit["ranker"] for hit in json.loads(result.stdout)} == {"bm25"}
    assert "pip install 'codemode[semantic]'" in result.stderr
    _configure(workspace, "auto")  # auto asks for nothing, so says nothing
    quiet = CliRunner().invoke(
        cli, ["search", "remove a customer", "--json", "--config", str(workspace / "codemode.toml")]
    )
    assert "codemode[semantic]" not in quiet.stderr


@pytest.mark.usefixtures("model")
def test_the_human_output_names_the_ranker_on_stderr(workspace: Path) -> None:
    result = CliRunner().invoke(
        cli, ["search", "remove a customer", "--config", str(workspace / "codemode.toml")]
    )
    assert result.exit_code == 0, result.output
    assert "ranked by hybrid" in result.stderr
    assert result.stdout.splitlines()[0].startswith("servers.crm.delete_customer")
