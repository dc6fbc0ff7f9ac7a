"""A deployment for skill tests without starting a server: a config naming the example crm server
and a codemode.lock whose approved tools are written here (so a test can change a tool's pin)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from codemode.catalog import (
    LockFile,
    ServerCatalog,
    ToolSpec,
    approve,
    load_lock,
    observe,
    save_lock,
    tool_hash,
)
from codemode.cli._main import cli
from codemode.config import load_config
from codemode.ledger import SqliteLedger, open_ledger
from codemode.stubs import VirtualTree, render_tree

REPO = Path(__file__).resolve().parents[2]
CRM = REPO / "examples" / "servers" / "crm_server.py"

SKILL = '''"""Customer helpers."""

from servers.crm import get_customer


def company(customer_id: str) -> str:
    """The company name of one customer."""
    return str(get_customer(customer_id=customer_id)["company"])
'''


def _tool(name: str, description: str) -> ToolSpec:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"customer_id": {"type": "string"}},
        "required": ["customer_id"],
    }
    digest = tool_hash(
        name=name,
        title=None,
        description=description,
        input_schema=schema,
        output_schema=None,
        annotations=None,
    )
    return ToolSpec(server="crm", name=name, description=description, input_schema=schema, schema_hash=digest)


def _crm(description: str) -> ServerCatalog:
    return ServerCatalog(
        server="crm", tools=(_tool("get_customer", description), _tool("add_note", "Add a note."))
    )


def crm_tree(description: str = "Look up one customer.") -> VirtualTree:
    """The stub tree of crm's two tools, as ``approve_tools`` approves them."""
    return render_tree([_crm(description)])


def approve_tools(root: Path, description: str = "Look up one customer.") -> None:
    """Approve crm's get_customer (with this description) and add_note in ``root/codemode.lock``."""
    lock_path = root / "codemode.lock"
    lock = load_lock(lock_path) if lock_path.exists() else LockFile()
    lock, _ = observe(lock, _crm(description))
    lock, _ = approve(lock, require_pending=False)
    save_lock(lock_path, lock)


def deployment(root: Path, extra: str = "") -> Path:
    """``root/codemode.toml`` with the crm server and ``extra`` appended; tools approved."""
    config = root / "codemode.toml"
    config.write_text(
        f"[servers.crm]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(CRM))}]\n{extra}",
        encoding="utf-8",
    )
    approve_tools(root)
    return config


LedgerToml = Callable[[], str]
"""``ledger_toml()`` (the fixture in tests/skills/conftest.py): a ``[ledger]`` section naming a
new, empty ledger of the test's backend ("" for SQLite: the default file beside the config)."""

MakeDeployment = Callable[..., Path]
"""``make_deployment(root, extra="")`` (the fixture in tests/skills/conftest.py): :func:`deployment`
on the test's ledger backend, SQLite or PostgreSQL; a new ledger for each call."""


def deployment_ledger(config: Path) -> SqliteLedger:
    """The ledger ``config`` names (a SQLite file or a PostgreSQL database), opened."""
    return open_ledger(load_config(config).ledger_location())


def skill_cli(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["skill", *args, "--config", str(config)], catch_exceptions=False)


def skill_json(config: Path, *args: str) -> Any:
    result = skill_cli(config, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
