"""One fixture MCP server over stdio, every tool approved, programs in a local sandbox.

The deployment that the tests of a server's requests during a call share (elicitation, sampling,
long-running tasks): what the server saw is read from the JSON-lines log it writes, what
codemode recorded from the ledger.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from codemode import CallbackApprover, CodeMode
from codemode.broker import ApprovalAnswer, ApprovalRequest
from codemode.catalog import save_lock
from codemode.config import Config, config_from_mapping
from codemode.host import McpHost
from codemode.ledger import CallRecord, open_ledger
from codemode.testing import approved_pins


async def approve_everything(request: ApprovalRequest) -> ApprovalAnswer:
    return ApprovalAnswer(True, "test")


@dataclass
class FixtureServer:
    config: Config
    log: Path

    def logged(self) -> list[dict[str, Any]]:
        """Every line the server logged, oldest first."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]

    def requests(self, method: str) -> list[dict[str, Any]]:
        """The logged requests of one method (for servers that log each request's ``method``)."""
        return [r for r in self.logged() if r.get("method") == method]

    def calls(self, run_id: str | None = None) -> list[CallRecord]:
        ledger = open_ledger(self.config.ledger_path, create=False)
        try:
            return ledger.list_calls(run_id=run_id, newest_first=False)
        finally:
            ledger.close()

    def engine(self, **options: Any) -> CodeMode:
        """An engine on the deployment that approves every call (consent is not under test)."""
        return CodeMode(self.config, approver=CallbackApprover(approve_everything), **options)


Deployed = TypeVar("Deployed", bound=FixtureServer)


async def deploy_fixture_server(
    kind: type[Deployed],
    tmp_path: Path,
    name: str,
    script: Path,
    *,
    log: str,
    log_env: str | None = None,
    args: tuple[str, ...] = (),
    protocol: str,
    backend: str = "process",
    policy: dict[str, Any] | None = None,
    url: str | None = None,
    **server: Any,
) -> Deployed:
    """Deploy ``script`` as server ``name`` (trusted, pinned and approved as it lists itself).

    The server logs to ``tmp_path / log``: given in the environment variable ``log_env``, or
    else as ``--log PATH`` after ``args``. What it logged while being listed is cleared. With
    ``url``, the script is already serving there over HTTP (started with that log), and is
    reached at it instead of being run over stdio.
    """
    log_path = tmp_path / log
    argv = [str(script), *args] + ([] if log_env else ["--log", str(log_path)])
    where: dict[str, Any] = (
        {"url": url, "allow_loopback": True}
        if url is not None
        else {"command": sys.executable, "args": argv, "env": {log_env: str(log_path)} if log_env else {}}
    )
    config = config_from_mapping(
        {
            "servers": {
                name: {
                    **where,
                    "protocol": protocol,
                    "trusted": True,
                    **server,
                }
            },
            "sandbox": {"backend": backend, "pool_size": 0},
            "policy": policy or {},
        },
        base_dir=tmp_path,
    )
    async with McpHost(config) as host:
        save_lock(config.lock_path, approved_pins(host.catalogs()).lock)
    log_path.unlink(missing_ok=True)
    return kind(config, log_path)
