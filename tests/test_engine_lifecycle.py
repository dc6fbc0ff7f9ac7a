"""The engine's lifecycle: whatever started is stopped, even when a later part fails to start."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

import codemode.engine._engine as engine_module
from codemode import CodeMode, config_from_mapping
from codemode.errors import SandboxUnavailableError
from codemode.sandbox import SandboxManager

pytestmark = pytest.mark.anyio

CRM = Path(__file__).resolve().parents[1] / "examples" / "servers" / "crm_server.py"


async def test_a_sandbox_that_cannot_start_leaves_no_open_ledger_and_no_server_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[bool] = []
    real_open = engine_module.open_ledger

    def tracking_open(*args: Any, **kwargs: Any) -> Any:
        ledger = real_open(*args, **kwargs)
        real_close = ledger.close

        def close() -> None:
            closed.append(True)
            real_close()

        ledger.close = close  # type: ignore[method-assign]
        return ledger

    async def refuse(self: SandboxManager) -> SandboxManager:
        raise SandboxUnavailableError("no sandbox backend here (test)")

    monkeypatch.setattr(engine_module, "open_ledger", tracking_open)
    monkeypatch.setattr(SandboxManager, "__aenter__", refuse)
    state = tmp_path / "crm-state"
    config = config_from_mapping(
        {
            "servers": {
                "crm": {"command": sys.executable, "args": [str(CRM)], "env": {"CRM_STATE_DIR": str(state)}}
            },
            "sandbox": {"backend": "process", "pool_size": 0},
        },
        base_dir=tmp_path,
    )
    with pytest.raises(SandboxUnavailableError):
        async with CodeMode(config):
            pass
    assert closed == [True], "the ledger was closed"
    assert ours(state) == [], "the MCP server process was stopped"


def ours(state: Path) -> list[psutil.Process]:
    """This test's crm server processes (other tests may run crm servers of their own)."""
    found: list[psutil.Process] = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if str(CRM) in " ".join(proc.cmdline()) and proc.environ().get("CRM_STATE_DIR") == str(state):
                found.append(proc)
    return found
