"""Helpers to start the example servers (``examples/servers``) as real subprocesses."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

SERVERS_DIR = Path(__file__).resolve().parents[2] / "examples" / "servers"
START_TIMEOUT = 30.0


def server_script(name: str) -> str:
    return str(SERVERS_DIR / f"{name}_server.py")


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRM_", "TICKETS_"))}
    env.update(extra or {})
    return env


def stdio_server(name: str, *args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[server_script(name), *args], env=server_env(env)
    )


@dataclass
class HttpServer:
    process: subprocess.Popen[str]
    url: str
    stderr: list[str] = field(default_factory=list[str])


@contextmanager
def http_server(
    name: str, *args: str, env: dict[str, str] | None = None
) -> Generator[HttpServer, None, None]:
    """Start ``name`` over Streamable HTTP on a free 127.0.0.1 port; wait for its READY line."""
    process = subprocess.Popen(
        [sys.executable, server_script(name), "--transport", "http", "--port", "0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(env),
    )
    lines: queue.Queue[str | None] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            seen.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        deadline = time.monotonic() + START_TIMEOUT
        url = None
        while url is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"{name} did not print READY within {START_TIMEOUT}s: {''.join(seen)}")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                pytest.fail(f"{name} exited with {process.wait()} before READY: {''.join(seen)}")
            if line.startswith("READY "):
                url = line.split()[1]
        yield HttpServer(process, url, seen)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    """Poll ``predicate`` until it holds, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def run_cli(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, server_script(name), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(env),
        check=False,
    )


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def start_http() -> Callable[..., AbstractContextManager[HttpServer]]:
    return http_server


@pytest.fixture
def stdio() -> Callable[..., StdioServerParameters]:
    return stdio_server


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_cli


@pytest.fixture
def poll() -> Callable[..., None]:
    return wait_for


@pytest.fixture(scope="session")
def shared_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """State of the long-lived servers shared by the tests (``crm``, ``tickets`` fixtures)."""
    return tmp_path_factory.mktemp("state")


# Module scope, not session: while an async fixture lives, anyio's test runner stays leased and
# marks this thread as running asyncio (with sniffio installed), so any later synchronous
# `anyio.run` in the worker - a CLI test, a sync fixture - would refuse to start.
@pytest.fixture(scope="module")
async def docs(anyio_backend: str) -> AsyncIterator[Client]:
    async with Client(stdio_server("docs")) as client:
        yield client


@pytest.fixture(scope="module")
async def tickets(anyio_backend: str, shared_state_dir: Path) -> AsyncIterator[Client]:
    async with Client(stdio_server("tickets", "--state-dir", str(shared_state_dir / "tickets"))) as client:
        yield client


@pytest.fixture(scope="module")
async def crm(anyio_backend: str, shared_state_dir: Path) -> AsyncIterator[Client]:
    async with Client(stdio_server("crm", "--state-dir", str(shared_state_dir / "crm"))) as client:
        yield client
