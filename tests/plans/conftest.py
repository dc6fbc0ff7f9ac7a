"""A CodeMode on the real ``crm`` example server (stdio, trusted: its hints set the risks), with
its writes counted from outside the process, for the plan tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from codemode import CodeMode, config_from_mapping
from codemode.catalog import approve, load_lock, observe, save_lock
from codemode.config import Config
from codemode.host import McpHost

CRM = Path(__file__).resolve().parents[2] / "examples" / "servers" / "crm_server.py"

CountWrites = Callable[[], int]


@pytest.fixture
def crm_state(tmp_path: Path) -> Path:
    state = tmp_path / "crm-state"
    state.mkdir()
    return state


@pytest.fixture
def count_writes(crm_state: Path) -> CountWrites:
    """The writes the crm server committed, as its own ``count-writes`` command reports them."""

    def count() -> int:
        out = subprocess.run(
            [sys.executable, str(CRM), "count-writes", "--state-dir", str(crm_state)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return int(json.loads(out)["writes"])

    return count


@pytest.fixture
async def plan_config(tmp_path: Path, crm_state: Path) -> Config:
    data: dict[str, Any] = {
        "servers": {
            "crm": {
                "command": sys.executable,
                "args": [str(CRM), "--state-dir", str(crm_state)],
                "trusted": True,
            }
        },
        "sandbox": {"backend": "process", "pool_size": 1},
        "ledger": {"path": str(tmp_path / "ledger.db")},
    }
    config = config_from_mapping(data, base_dir=tmp_path)
    async with McpHost(config) as host:
        lock = load_lock(config.lock_path)
        for catalog in host.catalogs():
            lock, _ = observe(lock, catalog)
        save_lock(config.lock_path, approve(lock)[0])
    return config


@pytest.fixture
async def engine(plan_config: Config) -> AsyncIterator[CodeMode]:
    async with CodeMode(plan_config) as cm:
        yield cm
