"""``codemode ledger archive`` and ``ledger verify --archive`` through click's CliRunner, with
``[ledger.retention]`` choosing what is old."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from codemode.cli._ledger_cmd import ledger as ledger_group
from codemode.config import config_from_mapping
from codemode.errors import ConfigError
from codemode.ledger import open_ledger
from codemode.testing import FakeClock
from tests.ledger.test_archive import settled_run


def run(*args: str) -> Result:
    return CliRunner().invoke(ledger_group, list(args), catch_exceptions=False)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def write_config(tmp_path: Path, retention: str = "") -> Path:
    path = tmp_path / "codemode.toml"
    path.write_text(retention, encoding="utf-8")
    return path


@pytest.fixture
def ledger_file(tmp_path: Path) -> Path:
    """One run 40 days ago and one now, beside the config."""
    path = tmp_path / "codemode.db"
    with open_ledger(path, clock=FakeClock(datetime.now(UTC) - timedelta(days=40))) as store:
        settled_run(store, "old-1")
    with open_ledger(path) as store:
        settled_run(store, "new-1")
    return path


def test_retention_archives_what_is_old_and_verify_checks_archive_and_database(
    tmp_path: Path, ledger_file: Path
) -> None:
    config = str(write_config(tmp_path, "[ledger.retention]\narchive_after_days = 30\n"))
    planned = as_json(run("archive", "--config", config, "--dry-run", "--json"))
    assert planned["dry_run"] is True and planned["events"] > 0 and planned["segment"] is None
    assert not list((tmp_path / "ledger-archive").glob("events-*"))

    done = as_json(run("archive", "--config", config, "--json"))
    assert (done["events"], done["last_seq"]) == (planned["events"], planned["last_seq"])
    assert (tmp_path / "ledger-archive" / done["segment"]).is_file()
    assert as_json(run("archive", "--config", config, "--json"))["events"] == 0  # nothing twice

    report = as_json(
        run("verify", "--config", config, "--archive", str(tmp_path / "ledger-archive"), "--json")
    )
    assert (report["ok"], report["archive_checked"], report["archived_seq"]) == (True, True, done["last_seq"])
    plain = run("verify", "--config", config)
    assert plain.exit_code == 0 and "not re-checked" in plain.output

    runs = as_json(run("list", "--config", config, "--runs", "--json"))["runs"]
    assert {r["run_id"] for r in runs} == {"old-1", "new-1"}
    assert as_json(run("show", "old-1", "--config", config, "--json"))["run"]["status"] == "ok"


def test_a_tampered_archive_fails_verify(tmp_path: Path, ledger_file: Path) -> None:
    config = str(write_config(tmp_path))
    done = as_json(
        run("archive", "--config", config, "--before", "2100-01-01", "--to", str(tmp_path / "a"), "--json")
    )
    segment = tmp_path / "a" / done["segment"]
    segment.write_text(segment.read_text(encoding="utf-8").replace("alice", "eve"), encoding="utf-8")
    failed = run("verify", "--config", config, "--archive", str(tmp_path / "a"))
    assert failed.exit_code == 1
    assert "archive_segment" in failed.output and "digest" in failed.output


def test_archive_without_a_date_or_retention_says_what_to_do(tmp_path: Path, ledger_file: Path) -> None:
    config = str(write_config(tmp_path))
    result = run("archive", "--config", config)
    assert result.exit_code != 0
    assert "--before DATE" in result.output and "archive_after_days" in result.output
    bad = run("archive", "--config", config, "--before", "last tuesday")
    assert bad.exit_code != 0 and "YYYY-MM-DD" in bad.output


def test_retention_settings_are_checked_for_shape() -> None:
    config = config_from_mapping({"ledger": {"retention": {"archive_after_days": 7, "archive_dir": "old"}}})
    assert config.ledger.retention.archive_after_days == 7
    with pytest.raises(ConfigError, match="archive_after_days"):
        config_from_mapping({"ledger": {"retention": {"archive_after_days": 0}}})
    with pytest.raises(ConfigError, match=r"retention\.keep"):
        config_from_mapping({"ledger": {"retention": {"keep": True}}})
