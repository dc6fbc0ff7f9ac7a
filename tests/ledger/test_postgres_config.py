"""`[ledger] url` in codemode.toml: the engine and the CLI keep the ledger in PostgreSQL.

The password comes from a ``${ENV}`` reference, resolved at open time; it is never in the file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemode import CodeMode, load_config
from codemode.calls import ToolResult
from codemode.catalog import approve, load_lock, observe, save_lock
from codemode.cli._main import cli
from codemode.errors import MissingSecretError
from codemode.host import McpHost
from tests.ledger._pg import PostgresServer

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

CRM = Path(__file__).resolve().parents[2] / "examples" / "servers" / "crm_server.py"
PASSWORD_VAR = "CODEMODE_TEST_LEDGER_PASSWORD"


@pytest.fixture
def config_path(postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    database = postgres_server.new_database()
    url = postgres_server.url_with_reference(database, PASSWORD_VAR)
    monkeypatch.setenv(PASSWORD_VAR, postgres_server.password_in_url)
    path = tmp_path / "codemode.toml"
    path.write_text(
        f"[servers.crm]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(CRM))}]\n"
        f"trusted = true\nenv = {{ CRM_STATE_DIR = {json.dumps(str(tmp_path / 'crm'))} }}\n\n"
        f'[sandbox]\nbackend = "process"\npool_size = 0\n\n[ledger]\nurl = "{url}"\n',
        encoding="utf-8",
    )
    return path


async def test_calls_are_recorded_in_postgres_and_the_cli_verifies_them(config_path: Path) -> None:
    config = load_config(config_path)
    assert password_is_a_reference(config_path)
    async with McpHost(config) as host:
        lock = load_lock(config.lock_path)
        for catalog in host.catalogs():
            lock, _ = observe(lock, catalog)
        save_lock(config.lock_path, approve(lock)[0])
    async with CodeMode(config) as engine:
        outcome = await engine.call_tool("crm", "get_customer", {"customer_id": "CUST-0001"}, purpose="test")
    assert isinstance(outcome, ToolResult), outcome
    assert not (config_path.parent / "codemode.db").exists(), "no SQLite ledger was made"
    runner = CliRunner()
    listed = runner.invoke(cli, ["ledger", "list", "--config", str(config_path), "--json"])
    assert listed.exit_code == 0, listed.output
    assert "get_customer" in listed.output
    verified = runner.invoke(cli, ["ledger", "verify", "--config", str(config_path), "--json"])
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["ok"] is True


def password_is_a_reference(config_path: Path) -> bool:
    return "${" + PASSWORD_VAR + "}" in config_path.read_text(encoding="utf-8")


def test_a_missing_password_variable_is_a_clear_error(
    config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PASSWORD_VAR)
    with pytest.raises(MissingSecretError, match=PASSWORD_VAR):
        load_config(config_path).ledger_location()


def test_a_ledger_url_that_is_not_postgres_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "codemode.toml"
    path.write_text('[ledger]\nurl = "mysql://db/ledger"\n', encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(cli, ["ledger", "list", "--config", str(path)])
    assert result.exit_code != 0
    assert "postgresql://" in result.output
