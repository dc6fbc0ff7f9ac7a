"""A workspace for batch tests: the example crm server (its own state), synced and pinned."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CRM = REPO / "examples" / "servers" / "crm_server.py"
CODEMODE = [sys.executable, "-m", "codemode.cli"]

WRITE_NOTE = """
from servers.crm import add_note
reply = add_note(customer_id=INPUT["customer"], text=f"batch note {INPUT['id']}")
# A call settled by 'ledger reconcile' replays as {"reconciled": ..., "receipt": ...}.
{"id": INPUT["id"], "receipt": reply.get("receipt_id") or reply.get("receipt")}
"""


@dataclass
class Workspace:
    root: Path
    env: dict[str, str] = field(default_factory=lambda: {})
    """Added to the environment of every codemode command run here."""

    @property
    def config(self) -> Path:
        return self.root / "codemode.toml"

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CODEMODE, *args, "--config", str(self.config)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env={**os.environ, **self.env},
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*CODEMODE, *args, "--config", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.root,
            env={**os.environ, **self.env},
            start_new_session=True,  # its own process group: SIGKILL takes servers and sandboxes too
        )

    def items(self, count: int, name: str = "items.jsonl", **extra: Any) -> Path:
        path = self.root / name
        with path.open("w", encoding="utf-8") as handle:
            for index in range(count):
                item = {"id": f"item-{index:04d}", "customer": f"CUST-000{1 + index % 5}", **extra}
                handle.write(json.dumps(item) + "\n")
        return path

    def program(self, source: str = WRITE_NOTE, name: str = "prog.py") -> Path:
        path = self.root / name
        path.write_text(source, encoding="utf-8")
        return path

    def crm_writes(self) -> list[str]:
        """The notes the crm server really committed (its own log, never through codemode)."""
        path = self.root / "crm-state" / "writes.sqlite3"
        if not path.exists():
            return []
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT arguments FROM writes ORDER BY sequence").fetchall()
        return [json.loads(row[0]).get("text", "") for row in rows]

    def calls_in_flight(self) -> int:
        """Calls the ledger records as sent and not yet answered (the default ledger, codemode.db)."""
        path = self.root / "codemode.db"
        if not path.exists():
            return 0
        with sqlite3.connect(path, timeout=30) as conn:
            try:
                return int(conn.execute("SELECT count(*) FROM calls WHERE state = 'sent'").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return 0
                raise

    def item_attempts(self, job_id: str) -> dict[str, int]:
        """Each item's attempts, as the job store counts them."""
        with sqlite3.connect(self.root / "codemode-jobs.db", timeout=30) as conn:
            rows = conn.execute("SELECT key, attempts FROM items WHERE job_id = ?", (job_id,)).fetchall()
        return {str(key): int(attempts) for key, attempts in rows}

    def ledger_calls(self, tool: str) -> list[str]:
        """The state of each call of ``tool`` the ledger recorded (denied ones too), oldest first."""
        with sqlite3.connect(self.root / "codemode.db", timeout=30) as conn:
            rows = conn.execute("SELECT state FROM calls WHERE tool = ? ORDER BY rowid", (tool,)).fetchall()
        return [str(row[0]) for row in rows]

    def item_states(self, job_id: str) -> dict[str, str]:
        path = self.root / "codemode-jobs.db"
        if not path.exists():
            return {}
        with sqlite3.connect(path, timeout=30) as conn:
            try:
                rows = conn.execute("SELECT key, status FROM items WHERE job_id = ?", (job_id,)).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):  # the batch process created the file, not yet its tables
                    return {}
                raise
        return {str(key): str(status) for key, status in rows}


MakeWorkspace = Callable[..., Workspace]


@pytest.fixture
def make_workspace(tmp_path: Path) -> MakeWorkspace:
    def make(
        *, crm_fault: str = "", backend: str = "process", extra: str = "", trusted: bool = True
    ) -> Workspace:
        """``trusted=False``: the crm server as a third-party one is, its tools high risk (every
        call of one needs an approval, which no batch can give)."""
        root = tmp_path / f"ws-{backend}-{len(list(tmp_path.iterdir()))}"
        root.mkdir()
        env = {"CRM_STATE_DIR": str(root / "crm-state")}
        if crm_fault:
            env["CRM_FAULT"] = crm_fault
        env_toml = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
        (root / "codemode.toml").write_text(
            f"[servers.crm]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(CRM))}]\n"
            + ("trusted = true\n" if trusted else "")
            + f"env = {{ {env_toml} }}\n\n"
            + f'[sandbox]\nbackend = "{backend}"\npool_size = 1\n\n'
            + ('[policy.consent]\nnever = ["crm/add_note"]\n' if trusted else "")
            + extra,
            encoding="utf-8",
        )
        # Docker sandboxes of this workspace carry their own pool label, so a test counts only them.
        pool = {"CODEMODE_POOL_ID": f"batch-test-{root.name}-{os.getpid()}"} if backend == "docker" else {}
        workspace = Workspace(root, pool)
        for command in (("sync",), ("pin", "--approve")):
            done = workspace.cli(*command)
            assert done.returncode == 0, done.stderr
        return workspace

    return make
