"""``codemode search`` answers a cached search through a memo of the validated config, and the memo
never outlives what it stands for: the config's bytes, its policy file, the lock and the principal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import codemode.config
from codemode.catalog import ServerCatalog
from codemode.cli import _search_cache
from codemode.cli._main import cli
from codemode.cli._search_cache import ConfigFacts, config_file, included_policy
from codemode.config import default_config_path, load_config
from codemode.search import cache_dir, read_sealed, write_sealed
from tests.search.test_search_cli import CRM, MAIL, approve_catalogs, tool_spec

CONFIG = """
[servers.crm]
command = "never-started"

[servers.mail]
command = "never-started"

[policy]
file = "policy.toml"
"""

POLICY = """
[principals.clerk]
tools = ["crm/*"]
"""


@pytest.fixture
def workspace(tmp_path: Path, private_search_cache: Path) -> Path:
    del private_search_cache  # requested for its environment
    (tmp_path / "codemode.toml").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "policy.toml").write_text(POLICY, encoding="utf-8")
    approve_catalogs(tmp_path, CRM, MAIL)
    return tmp_path


class Loads:
    """Counts full config loads: a search answered through the memo loads nothing."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = codemode.config.load_config

        def counting(*args: Any, **kwargs: Any) -> codemode.config.Config:
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(codemode.config, "load_config", counting)


def search(workspace: Path, *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(
        cli, ["search", *args, "--json", "--config", str(workspace / "codemode.toml")]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def memos() -> list[Path]:
    return sorted((cache_dir() / "config").glob("*.bin"))


def test_a_repeated_search_loads_no_config_and_answers_the_same(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = Loads(monkeypatch)
    first = search(workspace, "remove a customer")
    assert loads.count == 1 and len(memos()) == 1
    assert search(workspace, "remove a customer") == first
    assert search(workspace, "remove a customer", "--principal", "clerk") != first  # a memo per principal
    assert loads.count == 2 and len(memos()) == 2
    search(workspace, "remove a customer", "--principal", "clerk")
    assert loads.count == 2


def test_a_changed_lock_is_seen_although_the_config_is_not_loaded(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    search(workspace, "archive an email")
    loads = Loads(monkeypatch)
    approve_catalogs(
        workspace,
        ServerCatalog(server="mail", tools=(*MAIL.tools, tool_spec("mail", "archive_email", "Archive."))),
    )
    assert search(workspace, "archive an email")[0]["tool"] == "archive_email"
    assert loads.count == 1  # the memo's key was current, the index's was not: rebuilt from the config
    assert search(workspace, "archive an email")[0]["tool"] == "archive_email"
    assert loads.count == 1


def test_an_edited_config_or_policy_file_is_validated_again(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = Loads(monkeypatch)
    assert "delete_customer" in {hit["tool"] for hit in search(workspace, "delete", "--principal", "clerk")}
    (workspace / "policy.toml").write_text(
        POLICY + 'deny_tools = ["crm/delete_customer"]\n', encoding="utf-8"
    )
    assert "delete_customer" not in {
        hit["tool"] for hit in search(workspace, "delete", "--principal", "clerk")
    }
    assert loads.count == 2
    (workspace / "codemode.toml").write_text(
        CONFIG + "\n[search]\nsemantic = 'sometimes'\n", encoding="utf-8"
    )
    result = CliRunner().invoke(cli, ["search", "delete", "--config", str(workspace / "codemode.toml")])
    assert result.exit_code == 2 and "search.semantic" in result.stderr  # the error, as without a memo


class EditsThePolicyWhileLoading:
    """Replaces (or removes) the policy file right after load_config has read it: the race in which a
    search could file the old rules under the new file's hash."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, policy: Path, text: str | None) -> None:
        real = codemode.config.load_config

        def loading_then_editing(*args: Any, **kwargs: Any) -> codemode.config.Config:
            config = real(*args, **kwargs)
            if text is None:
                policy.unlink()
            else:
                policy.write_text(text, encoding="utf-8")
            monkeypatch.setattr(codemode.config, "load_config", real)  # once
            return config

        monkeypatch.setattr(codemode.config, "load_config", loading_then_editing)


@pytest.mark.parametrize("edit", ["tightened", "removed"])
def test_a_policy_edited_while_the_config_loads_is_not_missed(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, edit: str
) -> None:
    tightened = POLICY + 'deny_tools = ["crm/delete_customer"]\n'
    policy = workspace / "policy.toml"
    EditsThePolicyWhileLoading(monkeypatch, policy, tightened if edit == "tightened" else None)
    assert "delete_customer" in {hit["tool"] for hit in search(workspace, "delete", "--principal", "clerk")}
    assert memos() == []  # the rules loaded may not be the file's rules now: nothing is remembered
    if edit == "removed":
        policy.write_text(tightened, encoding="utf-8")
    loads = Loads(monkeypatch)
    assert "delete_customer" not in {
        hit["tool"] for hit in search(workspace, "delete", "--principal", "clerk")
    }
    assert loads.count == 1 and len(memos()) == 1  # validated again, and remembered now it is settled


def test_a_memo_for_a_principal_without_rules_never_names_the_index_of_everyone(tmp_path: Path) -> None:
    (tmp_path / "codemode.lock").write_text("{}", encoding="utf-8")
    handmade = ConfigFacts(str(tmp_path / "codemode.lock"), "off", "[]", None)
    assert handmade.parts(None, None) is not None
    assert handmade.parts(None, "clerk") is None


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "shared"])
def test_a_damaged_or_shared_memo_is_ignored_and_rewritten(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    first = search(workspace, "look up customer")
    [memo] = memos()
    data = memo.read_bytes()
    if damage == "shared":
        memo.chmod(0o666)
    else:
        flipped = data[:-5] + bytes([data[-5] ^ 1]) + data[-4:]
        memo.write_bytes({"flip": flipped, "truncate": data[:-10], "empty": b""}[damage])
    assert read_sealed(memo) is None
    loads = Loads(monkeypatch)
    assert search(workspace, "look up customer") == first
    assert loads.count == 1
    assert memo.read_bytes() == data and memo.stat().st_mode & 0o022 == 0


def test_facts_that_do_not_parse_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "memo.bin"
    write_sealed(path, b"\x00not marshal")
    payload = read_sealed(path)
    assert payload is not None and ConfigFacts.loads(payload) is None
    good = ConfigFacts("/x/codemode.lock", "on", "[]", None)
    assert ConfigFacts.loads(good.dumps()) == good
    odd = ConfigFacts("/x/codemode.lock", "sometimes", "[]", None)
    assert ConfigFacts.loads(odd.dumps()) is None


def test_the_memo_names_what_load_config_validated(workspace: Path) -> None:
    config = load_config(workspace / "codemode.toml")
    source = (workspace / "codemode.toml").read_bytes()
    policy = included_policy(source, config.base_dir)
    assert policy is not None and policy[1] is not None
    facts = ConfigFacts.of(config, "clerk", (policy[0], policy[1]))
    assert facts.lock_path == str(config.lock_path)
    assert facts.policy_file == str(workspace.resolve() / "policy.toml") and facts.policy_unchanged()
    assert facts.servers == json.dumps(["crm", "mail"]) and facts.semantic == "off"
    assert facts.rules is not None and "crm/*" in facts.rules


def test_the_config_file_is_found_as_load_config_finds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEMODE_CONFIG", raising=False)
    assert config_file(None) == default_config_path(None)
    assert config_file(Path("x.toml")) == default_config_path(Path("x.toml"))
    monkeypatch.setenv("CODEMODE_CONFIG", "/elsewhere/c.toml")
    assert config_file(None) == default_config_path(None) == Path("/elsewhere/c.toml")
    assert _search_cache.config_file is config_file


@pytest.mark.integration
def test_a_cached_json_search_imports_no_config_models_nor_rich(workspace: Path) -> None:
    argv = ["search", "customer", "--json", "--config", str(workspace / "codemode.toml")]
    probe = (
        "import sys\n"
        "from codemode.cli._main import cli\n"
        "try:\n"
        f"    cli({argv!r}, prog_name='codemode')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(repr(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(workspace / "cache")}
    command = [sys.executable, "-c", probe]
    subprocess.run(command, capture_output=True, env=env, check=True)  # builds the index and the memo
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    loaded = set(eval(done.stderr.strip().splitlines()[-1]))  # our own probe's repr
    assert json.loads(done.stdout)[0]["ranker"] == "bm25"
    assert not loaded & {"pydantic", "rich", "numpy", "tokenizers"}, loaded


def test_another_install_of_the_validator_names_another_memo(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.machinery
    import importlib.util

    real_find_spec = importlib.util.find_spec
    installed = tmp_path / "site" / "pydantic"
    installed.mkdir(parents=True)

    def find_spec(name: str, package: str | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "pydantic":
            return real_find_spec(name, package)
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(installed)]
        return spec

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    config, source = workspace / "codemode.toml", (workspace / "codemode.toml").read_bytes()
    first = _search_cache._memo_path(config, source, None)  # pyright: ignore[reportPrivateUsage]
    assert _search_cache._memo_path(config, source, None) == first  # pyright: ignore[reportPrivateUsage]
    installed.rmdir()
    installed.mkdir()  # an upgrade: the package's folder is made again
    os.utime(installed, ns=(1, 1))
    assert _search_cache._memo_path(config, source, None) != first  # pyright: ignore[reportPrivateUsage]


def test_a_cache_that_cannot_be_written_is_reported_and_the_search_still_answers(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)  # the cache folder now belongs to someone else
    argv = ["search", "customer", "--json", "--config", str(workspace / "codemode.toml")]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["tool"]
    assert "the search cache could not be written" in result.stderr and "CODEMODE_CACHE_DIR" in result.stderr
    monkeypatch.setattr(os, "getuid", lambda: uid)
    assert "could not be written" not in CliRunner().invoke(cli, argv).stderr


def test_a_ledger_that_holds_no_skill_keeps_the_cached_search_free_of_the_config(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from codemode.ledger import open_ledger

    first = search(workspace, "remove a customer")
    ledger = open_ledger(load_config(workspace / "codemode.toml").ledger_path)  # a ledger with runs, no skill
    ledger.close()
    loads = Loads(monkeypatch)
    assert search(workspace, "remove a customer") == first
    assert loads.count == 0  # the ledger was probed, not loaded: it holds no skill


def test_the_probe_reads_the_ledgers_table_of_skills(tmp_path: Path) -> None:
    import sqlite3

    from codemode.ledger import open_ledger

    open_ledger(tmp_path / "ledger.sqlite").close()
    facts = ConfigFacts("lock", "off", "[]", None, ledger=str(tmp_path / "ledger.sqlite"))
    assert not facts.may_hold_skills()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        assert db.execute(_search_cache._ANY_SKILL).fetchall() == []  # pyright: ignore[reportPrivateUsage]
        db.execute("DROP TABLE skills")  # an older ledger, from before skills
    assert not facts.may_hold_skills()
    assert ConfigFacts("lock", "off", "[]", None).may_hold_skills()  # a database URL: look properly
