"""Fixtures shared by the whole suite: the example servers over stdio and Streamable HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import hypothesis  # noqa: F401  # pyright: ignore[reportUnusedImport] - imported early: a late import at session end trips a CPython 3.11.7 ast bug
import pytest

from tests.ledger._pg import PostgresServer, shared_server

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_SERVERS = REPO / "examples" / "servers"
FIXTURE_SERVERS = REPO / "tests" / "fixtures" / "servers"


# -- the longest files first ------------------------------------------------------------------
# xdist hands whole files to its workers in collection order (``./dev test`` passes
# --no-loadscope-reorder; by default xdist would sort files by their number of tests). A long
# file handed out last runs alone at the end while the other worker idles, so the files that
# take minutes start first: the two longest by name (from ``--durations`` in CI), then every
# other file with a test marked slow.

LONGEST_FILES = ("tests/conformance/test_conformance_auth.py", "tests/batch/test_ray.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_integration(items)
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def rank(item: pytest.Item) -> int:
        name = item.path.relative_to(REPO).as_posix()
        if name in LONGEST_FILES:
            return LONGEST_FILES.index(name)
        return len(LONGEST_FILES) + (item.path not in slow_files)

    items.sort(key=rank)  # stable: the order within a rank is kept


# -- the two tiers: quick and integration ---------------------------------------------------
# A test that starts a process, a container, a server or a database is an integration test.
# The markers and fixtures below imply it; any other such test says so itself
# (``pytestmark = pytest.mark.integration``). ``./dev quick`` runs ``-m "not integration"``
# with CODEMODE_TEST_TIER=quick, and then a test that starts a process or opens a network
# listener fails, naming the marker it lacks: the quick tier cannot rot into a slow one.

INTEGRATION_MARKERS = ("docker", "bwrap", "postgres", "ray", "browser", "slow")
INTEGRATION_FIXTURES = frozenset(
    {"docker_image", "example_stdio", "fixture_stdio", "http_servers", "postgres_server"}
)
QUICK_TIER = os.environ.get("CODEMODE_TEST_TIER", "") == "quick"


def mark_integration(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("integration") is not None:
            continue
        implied = any(item.get_closest_marker(name) is not None for name in INTEGRATION_MARKERS)
        fixtures = set(cast(list[str], getattr(item, "fixturenames", [])))
        if implied or fixtures & INTEGRATION_FIXTURES:
            item.add_marker(pytest.mark.integration)


class StartsSomething(Exception):
    """Raised in the quick tier by a test that starts a process or a network server."""


def _refuse(what: str) -> Callable[..., Any]:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise StartsSomething(
            f"this test {what}: mark it integration (pytestmark = pytest.mark.integration), "
            "or run it with ./dev test"
        )

    return refuse


@pytest.fixture(autouse=QUICK_TIER)
def quick_tier_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    original_bind = socket.socket.bind

    def bind(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _refuse(f"opens a network listener on {address!r}")()
        original_bind(self, address)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("starts a process"))
    monkeypatch.setattr(os, "fork", _refuse("forks a process"))
    monkeypatch.setattr(os, "posix_spawn", _refuse("starts a process"))
    monkeypatch.setattr(os, "posix_spawnp", _refuse("starts a process"))
    monkeypatch.setattr(socket.socket, "bind", bind)


# -- "duplicate side effects: N" at the end of a run ------------------------------------------
# The fault tests (tests/e2e) attach (scenario, operations, writes) to their reports as a user
# property. Reports reach this process from xdist workers too, so the sum covers the whole run.

SIDE_EFFECTS_PROPERTY = "codemode_side_effects"
_side_effects: list[tuple[str, int, int]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == SIDE_EFFECTS_PROPERTY:
            scenario, operations, writes = cast(tuple[str, int, int], value)
            _side_effects.append((scenario, operations, writes))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _side_effects:
        return
    writes = sum(w for _, _, w in _side_effects)
    operations = sum(o for _, o, _ in _side_effects)
    duplicates = sum(max(0, w - o) for _, o, w in _side_effects)
    terminalreporter.write_sep("=", "side effects (tests/e2e)")
    terminalreporter.write_line(
        f"duplicate side effects: {duplicates} "
        f"({writes} writes observed for {operations} distinct operations in {len(_side_effects)} fault runs)"
    )
    for scenario, ops, w in _side_effects:
        terminalreporter.write_line(
            f"  {scenario}: {ops} operations, {w} writes, {max(0, w - ops)} duplicates"
        )


# -- the Docker engine and the sandbox image -------------------------------------------------

REQUIRE_DOCKER = os.environ.get("CODEMODE_REQUIRE_DOCKER", "").strip() not in ("", "0", "false", "no")
SANDBOX_IMAGE = os.environ.get("CODEMODE_SANDBOX_IMAGE", "codemode-sandbox:latest")


def _docker_unavailable(reason: str) -> None:
    if REQUIRE_DOCKER:
        pytest.fail(f"CODEMODE_REQUIRE_DOCKER is set but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The sandbox image, built if missing or built from another runtime version.

    Skips without an engine, or fails when ``CODEMODE_REQUIRE_DOCKER`` is set (CI)."""
    from codemode.errors import SandboxUnavailableError
    from codemode.sandbox import build_image
    from codemode.sandbox._docker import RUNTIME_LABEL
    from codemode.sandbox._docker_api import docker_api
    from codemode.sandbox._files import runtime_digest

    try:
        api = docker_api(10.0)
    except SandboxUnavailableError as exc:
        _docker_unavailable(f"no Docker engine: {exc}")
        raise
    try:
        image = api.image(SANDBOX_IMAGE)
    finally:
        api.close()
    if image is None or image[1].get(RUNTIME_LABEL) != runtime_digest():
        try:
            build_image(SANDBOX_IMAGE)
        except Exception as exc:
            _docker_unavailable(f"the sandbox image {SANDBOX_IMAGE} cannot be built: {exc}")
            raise
    return SANDBOX_IMAGE


def example_server_script(name: str) -> Path:
    return EXAMPLE_SERVERS / f"{name}_server.py"


def stdio_entry(script: Path, *args: str, **options: Any) -> dict[str, Any]:
    """A ``[servers.<name>]`` mapping that runs ``script`` with this Python over stdio."""
    return {"command": sys.executable, "args": [str(script), *args], **options}


@pytest.fixture
def example_stdio() -> Callable[..., dict[str, Any]]:
    def make(name: str, *args: str, **options: Any) -> dict[str, Any]:
        return stdio_entry(example_server_script(name), *args, **options)

    return make


@pytest.fixture
def fixture_stdio() -> Callable[..., dict[str, Any]]:
    def make(name: str, *args: str, **options: Any) -> dict[str, Any]:
        return stdio_entry(FIXTURE_SERVERS / f"{name}.py", *args, **options)

    return make


class HttpServers:
    """Starts example servers over Streamable HTTP on 127.0.0.1 and stops them at teardown."""

    def __init__(self) -> None:
        self._processes: list[subprocess.Popen[str]] = []

    def start(self, name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 30.0) -> str:
        """Start the example server ``name`` on a free port; its URL."""
        script = example_server_script(name)
        return self.start_script(
            script, "--transport", "http", "--port", "0", *args, env=env, timeout=timeout
        )

    def start_script(
        self, script: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 30.0
    ) -> str:
        """Start a server script that prints ``READY <url>`` on stderr once it listens; its URL."""
        name = script.stem
        command = [sys.executable, str(script), *args]
        process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self._processes.append(process)
        url: list[str] = []
        ready = threading.Event()

        def watch() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                if line.startswith("READY ") and not url:
                    url.append(line.split()[1])
                    ready.set()
            ready.set()

        threading.Thread(target=watch, daemon=True).start()
        if not ready.wait(timeout) or not url:
            raise RuntimeError(
                f"{name} server did not print READY within {timeout} s (exit {process.poll()})"
            )
        return url[0]

    def stop_all(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 10
        for process in self._processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def http_servers() -> Iterator[HttpServers]:
    servers = HttpServers()
    try:
        yield servers
    finally:
        servers.stop_all()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- PostgreSQL -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server (tests/ledger/_pg.py), one per session, for every module."""
    with shared_server() as server:
        yield server
