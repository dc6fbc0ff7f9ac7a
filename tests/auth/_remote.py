"""A workspace whose server ``remote`` is the OAuth fixture (tests/fixtures/servers/oauth_server.py),
driven through the public CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "codemode.cli"]


@dataclass
class Remote:
    """A workspace whose ``remote`` server is the OAuth fixture."""

    root: Path
    url: str
    tokens: Path
    headers: Path

    @property
    def config(self) -> Path:
        return self.root / "codemode.toml"

    def env(self) -> dict[str, str]:
        return {**os.environ, "CODEMODE_CREDENTIALS": str(self.root / "home" / "credentials.json")}

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args, "--config", str(self.config)],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
            env=self.env(),
            check=False,
        )

    def issued(self) -> list[str]:
        return self.tokens.read_text().split() if self.tokens.exists() else []


def write_workspace(tmp_path: Path, url: str, *, backend: str = "process", extra: str = "") -> None:
    (tmp_path / "codemode.toml").write_text(
        f"""\
[servers.remote]
url = "{url}"
allow_loopback = true
{extra}
[servers.remote.oauth]

[sandbox]
backend = "{backend}"
pool_size = 0

[policy.consent]
never = ["remote/*"]
""",
        encoding="utf-8",
    )


def login(remote: Remote) -> dict[str, Any]:
    done = remote.cli("auth", "login", "remote", "--headless", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
