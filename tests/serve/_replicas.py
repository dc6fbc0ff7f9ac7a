"""Two ``codemode serve --transport http --console`` replicas on one PostgreSQL ledger, on 127.0.0.1.

Both read the same configuration except ``[serve] replica``: the example crm server (and a copy
of it whose every tool call sleeps, to hold a call in flight), bearer tokens for alice, bob (at
most :data:`RUNS_PER_MINUTE` runs a minute) and the operator ops, and the ledger in a database
of its own on the test session's PostgreSQL server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from click.testing import CliRunner

from codemode.cli._main import cli
from tests.ledger._pg import PostgresServer

CRM = Path(__file__).resolve().parents[2] / "examples" / "servers" / "crm_server.py"
PASSWORD_VAR = "CODEMODE_TEST_REPLICAS_LEDGER_PASSWORD"
TOKENS = {
    "alice": "alice-token-0123456789abcdef",
    "bob": "bob-token-0123456789abcdef",
    "ops": "ops-token-0123456789abcdef",
}
TOKEN_VARS = {name: f"CODEMODE_TEST_REPLICAS_{name.upper()}" for name in TOKENS}
RUNS_PER_MINUTE = 3
"""bob's ``[policy.quotas]``: runs per UTC minute, counted in the shared ledger."""


def _config(ledger_url: str, replica: str) -> str:
    python, crm = json.dumps(sys.executable), json.dumps(str(CRM))
    tokens = "".join(
        f'[serve.tokens.{name}]\ntoken = "${{{TOKEN_VARS[name]}}}"\nprincipal = "{name}"\ntenant = "acme"\n'
        + ('roles = ["operator"]\nconsole_tenants = ["*"]\n' if name == "ops" else "")
        for name in TOKENS
    )
    principals = "".join(f'[policy.principals.{name}]\ntenants = ["acme"]\n' for name in TOKENS)
    return f"""
[servers.crm]
command = {python}
args = [{crm}]
trusted = true

# The same server, every tool call of which sleeps for ten minutes: a call that stays in flight.
[servers.slowcrm]
command = {python}
args = [{crm}]
trusted = true
env = {{ CRM_FAULT = "slow=600" }}

[sandbox]
backend = "process"
pool_size = 4

[ledger]
url = {json.dumps(ledger_url)}

{principals}
# Its writes need no approval: the kill test's call goes out at once and stays in flight.
[policy.consent]
never = ["slowcrm/add_note"]

[policy.quotas.principals.bob]
runs_per_minute = {RUNS_PER_MINUTE}

[serve]
replica = "{replica}"
drain_s = 5

{tokens}"""


@dataclass
class Replica:
    name: str
    config: Path
    process: subprocess.Popen[bytes]
    base: str
    """``http://127.0.0.1:PORT``"""
    log: Path
    descendants: list[psutil.Process] = field(default_factory=lambda: [])

    @property
    def mcp(self) -> str:
        return f"{self.base}/mcp"

    @property
    def console(self) -> str:
        return f"{self.base}/console"

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def sigkill(self) -> None:
        """SIGKILL the serve process alone, as a crashed machine or the OOM killer would; its
        servers and sandboxes are left to the teardown."""
        self.descendants = psutil.Process(self.process.pid).children(recursive=True)
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.descendants = psutil.Process(self.process.pid).children(recursive=True)
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for child in self.descendants:
            with contextlib.suppress(psutil.Error):
                child.kill()


@dataclass
class Deployment:
    directory: Path
    ledger_url: str
    """With the password in it: for this process's own reads of the ledger."""
    env: dict[str, str]
    replicas: dict[str, Replica] = field(default_factory=lambda: {})

    def config(self, replica: str) -> Path:
        return self.directory / f"{replica}.toml"

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``codemode ARGS --config serve-b.toml`` as an operator would run it."""
        command = [sys.executable, "-m", "codemode.cli", *args, "--config", str(self.config("serve-b"))]
        return subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=120, check=False)


def _launch(name: str, config: Path, env: dict[str, str]) -> Replica:
    log = config.with_suffix(".log")
    command = [sys.executable, "-m", "codemode.cli", "serve", "--transport", "http", "--port", "0"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--console", "--metrics", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env=env,
            start_new_session=True,  # its own process group: the teardown ends its servers too
        )
    return Replica(name, config, process, "", log)


def _wait_ready(replica: Replica, timeout: float = 120.0) -> None:
    """Until the replica says where it listens (``READY <url>`` on stderr), then answers /readyz."""
    deadline = time.monotonic() + timeout
    while not replica.base:
        lines = replica.log.read_text(errors="replace").splitlines()
        ready = [line for line in lines if line.startswith("READY ")]
        if ready:
            replica.base = ready[0].split()[1].removesuffix("/mcp")
            break
        if replica.process.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(lines[-40:])
            raise RuntimeError(
                f"replica {replica.name} did not start (exit {replica.process.poll()}):\n{tail}"
            )
        time.sleep(0.2)
    while httpx.get(f"{replica.base}/readyz").status_code != 200:
        assert replica.process.poll() is None, replica.log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"replica {replica.name} never became ready"
        time.sleep(0.2)


@contextlib.contextmanager
def two_replicas(directory: Path, postgres: PostgresServer) -> Generator[Deployment]:
    """Replicas ``serve-a`` and ``serve-b``, both ready; stopped (whatever is left of them) after."""
    database = postgres.new_database()
    env = {
        **os.environ,
        PASSWORD_VAR: postgres.password_in_url,
        **{TOKEN_VARS[name]: token for name, token in TOKENS.items()},
    }
    deployment = Deployment(directory, postgres.url(database), env)
    referenced = postgres.url_with_reference(database, PASSWORD_VAR)
    for name in ("serve-a", "serve-b"):
        deployment.config(name).write_text(_config(referenced, name), encoding="utf-8")
    # One lock file beside both configurations: the tools are listed and approved once.
    runner = CliRunner(env={k: v for k, v in env.items() if k not in os.environ or os.environ[k] != v})
    for args in (["sync"], ["pin", "--approve"]):
        done = runner.invoke(cli, [*args, "--config", str(deployment.config("serve-a"))])
        assert done.exit_code == 0, done.output
    try:
        for name in ("serve-a", "serve-b"):  # both start at once, then both are waited for
            deployment.replicas[name] = _launch(name, deployment.config(name), env)
        for replica in deployment.replicas.values():
            _wait_ready(replica)
        yield deployment
    finally:
        for replica in deployment.replicas.values():
            replica.stop()
        postgres.drop_database(database)
