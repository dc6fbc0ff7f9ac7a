"""End-to-end fixtures: real MCP servers over stdio, real pins, real sandbox, broker and ledger.

A test asks ``deploy(...)`` for a :class:`Deployment`: a temporary directory with a
``codemode.toml`` (servers, policy, sandbox settings), the ``codemode.lock`` in which every
tool of the test servers was approved once per session with ``codemode sync`` and
``codemode pin --approve``, and helpers to read what the servers really did (the crm write log,
the files server's request log) and what the ledger recorded. ``deployment.engine()`` is an
entered :class:`CodeMode`; programs go through ``engine.run(code)``.

The sandbox backend is ``process`` unless a test takes the ``backend`` fixture, which also runs it
on ``docker`` (marked ``docker``: skipped without an engine, a failure instead when
``CODEMODE_REQUIRE_DOCKER`` is set).

Fault tests report the writes they observed next to the operations they asked for;
``pytest_terminal_summary`` prints "duplicate side effects: N" from those figures.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import psutil
import pytest
from click.testing import CliRunner, Result

from codemode.broker import Approver
from codemode.cli._main import cli
from codemode.config import load_config
from codemode.engine._engine import CodeMode
from codemode.ledger import CallRecord, SqliteLedger, open_ledger

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPTS: dict[str, Path] = {
    "crm": REPO / "examples" / "servers" / "crm_server.py",
    "drift": REPO / "tests" / "fixtures" / "servers" / "drifting_server.py",
    "files": HERE / "fixtures" / "files_server.py",
    "probe": HERE / "fixtures" / "probe_server.py",
    "hostile": HERE / "fixtures" / "hostile_server.py",
}
UNTRUSTED = {"hostile"}

CRM_WRITE_TOOLS = ["crm/add_note", "crm/record_payment", "crm/update_customer_email"]


# -- TOML ------------------------------------------------------------------------------------


def _toml_key(name: str) -> str:
    return name if name.replace("_", "").replace("-", "").isalnum() and name.isascii() else json.dumps(name)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, Mapping):
        mapping = cast(Mapping[str, Any], value)
        items = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in mapping.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in cast(Sequence[Any], value)) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def toml_document(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """``{"sandbox": {...}, "servers.crm": {...}}`` as TOML tables with inline values."""
    lines: list[str] = []
    for section, table in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items())
        lines.append("")
    return "\n".join(lines)


def server_entry(name: str, env: Mapping[str, str] | None = None, **options: Any) -> dict[str, Any]:
    # The suite's own servers annotate honestly, so they are trusted unless a test says otherwise.
    entry: dict[str, Any] = {
        "command": sys.executable,
        "args": [str(SCRIPTS[name])],
        "trusted": name not in UNTRUSTED,
        **options,
    }
    if env:
        entry["env"] = dict(env)
    return entry


def cli_invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


# -- pins, once per session ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def approved_lock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A codemode.lock with every tool of the test servers approved, made with the real CLI."""
    root = tmp_path_factory.mktemp("pins")
    config = root / "codemode.toml"
    servers = {f"servers.{name}": server_entry(name) for name in SCRIPTS}
    config.write_text(toml_document(servers), encoding="utf-8")
    synced = cli_invoke("sync", "--config", str(config), "--json")
    assert synced.exit_code == 0, synced.output
    approved = cli_invoke("pin", "--config", str(config), "--approve")
    assert approved.exit_code == 0, approved.output
    return root / "codemode.lock"


# -- a deployment ----------------------------------------------------------------------------------


@dataclass
class Deployment:
    root: Path
    backend: str = "process"
    approver: Approver | None = None
    engines: list[CodeMode] = field(default_factory=lambda: [])

    @property
    def config_path(self) -> Path:
        return self.root / "codemode.toml"

    @property
    def ledger_path(self) -> Path:
        return self.root / "codemode.db"

    @property
    def lock_path(self) -> Path:
        return self.root / "codemode.lock"

    @property
    def crm_state(self) -> Path:
        return self.root / "crm-state"

    @property
    def files_log(self) -> Path:
        return self.root / "files-requests.log"

    @contextlib.asynccontextmanager
    async def engine(self, **options: Any) -> AsyncGenerator[CodeMode]:
        options.setdefault("backend", self.backend)
        options.setdefault("approver", self.approver)
        async with CodeMode(load_config(self.config_path), **options) as engine:
            yield engine

    def heal_crm(self) -> None:
        """Drop ``CRM_FAULT`` from the config: the next engine starts a healthy crm server."""
        config = self.config_path.read_text(encoding="utf-8")
        healed = re.sub(r', CRM_FAULT = "[^"]*"', "", config)
        assert healed != config, "the crm server had no fault to heal"
        self.config_path.write_text(healed, encoding="utf-8")

    def cli(self, *args: str) -> Result:
        """``codemode ARGS --config <this deployment>``."""
        return cli_invoke(*args, "--config", str(self.config_path))

    async def acli(self, *args: str) -> Result:
        """:meth:`cli` from async code (commands that run their own event loop need a thread)."""
        return await anyio.to_thread.run_sync(lambda: self.cli(*args))

    # what the servers really did

    def crm_writes(self) -> list[dict[str, Any]]:
        """Every committed crm write, read from the server's own log (never through codemode)."""
        path = self.crm_state / "writes.sqlite3"
        if not path.exists():
            return []
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
            conn.row_factory = sqlite3.Row
            try:
                rows = conn.execute(
                    "SELECT sequence, receipt_id, tool, target_id, arguments FROM writes ORDER BY sequence"
                ).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):  # the server created the file but not its table yet
                    return []
                raise
        return [{**dict(row), "arguments": json.loads(row["arguments"])} for row in rows]

    def crm_write_count(self) -> int:
        return len(self.crm_writes())

    def crm_servers(self) -> list[psutil.Process]:
        """The crm server processes serving this deployment (found by their state directory)."""
        found: list[psutil.Process] = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline: list[str] = proc.info.get("cmdline") or []
            if str(SCRIPTS["crm"]) not in cmdline:
                continue
            with contextlib.suppress(psutil.Error):
                if proc.environ().get("CRM_STATE_DIR") == str(self.crm_state):
                    found.append(proc)
        return found

    def files_requested(self) -> list[str]:
        if not self.files_log.exists():
            return []
        return [json.loads(line) for line in self.files_log.read_text(encoding="utf-8").splitlines()]

    # what the ledger recorded

    def ledger(self, *, recover: bool = False) -> SqliteLedger:
        return open_ledger(self.ledger_path, create=False, recover=recover)

    def calls(self, run_id: str | None = None) -> list[CallRecord]:
        with self.ledger() as store:
            return store.list_calls(run_id=run_id, limit=1_000_000, newest_first=False)

    def executed_operations(self) -> int:
        """Distinct crm writes the ledger says reached the server and may have taken effect.

        One per idempotency key (however many attempts and replays it had), one per call
        without a key; only attempts that were sent and not settled as "did not happen".
        """
        executed = {"succeeded", "failed", "unknown", "reconciled_succeeded"}
        writes = {name.partition("/")[2] for name in CRM_WRITE_TOOLS}
        calls = [c for c in self.calls() if c.server == "crm" and c.tool in writes and c.state in executed]
        return len({c.idempotency_key or c.call_id for c in calls})


Deploy = Callable[..., Deployment]


@pytest.fixture
def deploy(tmp_path: Path, approved_lock: Path) -> Deploy:
    """Make a deployment: ``deploy(servers=..., policy=..., crm_fault=..., sandbox=..., call_timeout=...)``.

    ``servers`` lists the servers to configure (default: crm). ``policy`` is the ``[policy]``
    table as a dict (sub-tables included). ``crm_fault`` sets ``CRM_FAULT``.
    """

    def make(
        *,
        servers: tuple[str, ...] = ("crm",),
        policy: Mapping[str, Any] | None = None,
        crm_fault: str | None = None,
        call_timeout: float | None = None,
        sandbox: Mapping[str, Any] | None = None,
        backend: str = "process",
        approver: Approver | None = None,
        name: str = "deployment",
    ) -> Deployment:
        deployment = Deployment(tmp_path / name, backend=backend, approver=approver)
        deployment.root.mkdir()
        sections: dict[str, Mapping[str, Any]] = {}
        for server in servers:
            env: dict[str, str] = {}
            options: dict[str, Any] = {}
            if server == "crm":
                env["CRM_STATE_DIR"] = str(deployment.crm_state)
                if crm_fault:
                    env["CRM_FAULT"] = crm_fault
            if server == "files":
                env["FILES_LOG"] = str(deployment.files_log)
            if server == "hostile":
                env["HOSTILE_LOG"] = str(deployment.root / "hostile.log")
            if call_timeout is not None:
                options["call_timeout"] = call_timeout
            sections[f"servers.{server}"] = server_entry(server, env, **options)
        sections["sandbox"] = {"backend": backend, "wall_time_s": 120, **(sandbox or {})}
        policy = dict(policy or {})
        subtables = {k: policy.pop(k) for k in list(policy) if k in ("consent", "budget", "results")}
        sections["policy"] = policy
        for key, table in subtables.items():
            sections[f"policy.{key}"] = table
        deployment.config_path.write_text(toml_document(sections), encoding="utf-8")
        shutil.copyfile(approved_lock, deployment.lock_path)
        return deployment

    return make


# -- backends ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def docker_sandbox(docker_image: str) -> str:
    """The docker backend, once the engine answers and the image is built (tests/conftest.py)."""
    return "docker"


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        return request.getfixturevalue("docker_sandbox")
    return "process"


# -- waiting without sleeping blindly ------------------------------------------------------------------


async def _eventually(check: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await anyio.sleep(0.02)


Eventually = Callable[..., Awaitable[Any]]


@pytest.fixture
def eventually() -> Eventually:
    """``await eventually(check, timeout=..., what=...)``: poll until ``check()`` is truthy."""
    return _eventually


# -- duplicate side effects, reported at the end ---------------------------------------------------------


@dataclass(frozen=True)
class SideEffects:
    scenario: str
    operations: int
    """Distinct operations the program asked for that may have reached the server."""
    writes: int
    """Writes the server committed (from its own log)."""

    @property
    def duplicates(self) -> int:
        return max(0, self.writes - self.operations)


SIDE_EFFECTS: list[SideEffects] = []
SIDE_EFFECTS_PROPERTY = "codemode_side_effects"
"""The user property that tests/conftest.py sums into the run's summary (same literal there)."""


@pytest.fixture
def side_effects(request: pytest.FixtureRequest) -> Callable[[str, int, int], None]:
    def report(scenario: str, operations: int, writes: int) -> None:
        SIDE_EFFECTS.append(SideEffects(scenario, operations, writes))
        # Travels with the test's report (to the xdist controller too) for the run's summary.
        request.node.user_properties.append((SIDE_EFFECTS_PROPERTY, (scenario, operations, writes)))

    return report


@pytest.fixture
def side_effect_runs() -> list[SideEffects]:
    return SIDE_EFFECTS


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
