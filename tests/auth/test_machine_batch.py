"""A batch job on a server that takes machine clients only: no person signs in, and no token
reaches any output, lock, stub, ledger or sandbox.

The server is the OAuth fixture in its machine-only mode (``--machine-client``): its
``/token`` grants ``client_credentials`` to one client and ``/authorize`` refuses everyone. The
job runs through the public CLI (``sync``, ``pin --approve``, ``batch``), never ``auth login``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_SERVERS, HttpServers

pytestmark = pytest.mark.integration

SECRET = "machine-runner-secret-4f1c"
PROGRAM = """\
import os
from servers.remote import echo
{"echo": echo(text=INPUT["text"]), "environment": sorted(os.environ.items())}
"""


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CODEMODE_CREDENTIALS": str(root / "home" / "credentials.json"),
        "RUNNER_SECRET": SECRET,
    }
    command = [sys.executable, "-m", "codemode.cli", *args, "--config", str(root / "codemode.toml")]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=False)


def test_a_batch_signs_in_as_a_machine_and_no_token_leaks(tmp_path: Path, http_servers: HttpServers) -> None:
    tokens, headers = tmp_path / "issued.txt", tmp_path / "headers.txt"
    url = http_servers.start_script(
        FIXTURE_SERVERS / "oauth_server.py",
        "--port", "0", "--machine-client", f"batch-runner:{SECRET}",
        "--token-file", str(tokens), "--header-log", str(headers),
    )  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    (work / "codemode.toml").write_text(
        f"""\
[servers.remote]
url = "{url}"
allow_loopback = true

[servers.remote.oauth]
grant = "client_credentials"
issuer = "{url.removesuffix("/mcp")}"
client_id = "batch-runner"
client_secret = "${{RUNNER_SECRET}}"

[sandbox]
backend = "process"
pool_size = 0

[policy.consent]
never = ["remote/*"]
""",
        encoding="utf-8",
    )
    (work / "job.py").write_text(PROGRAM, encoding="utf-8")
    (work / "items.jsonl").write_text(
        "".join(json.dumps({"id": n, "text": f"item {n}"}) + "\n" for n in range(5)), encoding="utf-8"
    )

    steps = [
        cli(work, "sync"),
        cli(work, "pin", "--approve"),
        cli(work, "tree", "servers/remote", "--json"),
        cli(
            work,
            "batch",
            str(work / "job.py"),
            "--inputs",
            str(work / "items.jsonl"),
            "--key",
            "id",
            "--out",
            str(work / "out.jsonl"),
            "--json",
        ),
    ]
    for done in steps:
        assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(steps[-1].stdout)
    assert summary["counts"]["done"] == 5, summary
    outputs = [json.loads(line) for line in (work / "out.jsonl").read_text().splitlines()]
    assert sorted(str(item["result"]["echo"]["result"]) for item in outputs) == [
        f"item {n}" for n in range(5)
    ]

    issued = tokens.read_text().split()
    assert issued, "the machine signed in"
    assert any(line.startswith("Bearer ") for line in headers.read_text().splitlines())
    printed = "".join(done.stdout + done.stderr for done in steps)
    stored = {
        path: path.read_bytes()
        for path in work.rglob("*")
        if path.is_file() and path.name != "credentials.json"
    }
    assert any(path.suffix in (".sqlite", ".db") or "ledger" in path.name for path in stored), sorted(stored)
    for token in issued:
        assert token not in printed
        for path, data in stored.items():
            assert token.encode() not in data, f"a token in {path}"
    assert SECRET not in printed
    assert all(SECRET.encode() not in data for data in stored.values())
