"""A demo workspace (the example servers, synced and approved) and a running `codemode serve`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests._demo_workspace import make_workspace

__all__ = ["TOKENS", "TOKENS_TOML", "make_workspace", "serving_http"]

TOKENS = {
    "alice": "alice-token-0123456789abcdef",
    "bob": "bob-token-0123456789abcdef",
    "ops": "ops-token-0123456789abcdef",
    "audit": "audit-token-0123456789abcdef",
}


TOKENS_TOML = """
[policy.principals.alice]
tenants = ["acme"]
[policy.principals.bob]
tenants = ["acme"]
[serve.tokens.alice]
token = "${CODEMODE_TEST_ALICE}"
principal = "alice"
tenant = "acme"
[serve.tokens.bob]
token = "${CODEMODE_TEST_BOB}"
principal = "bob"
tenant = "acme"
"""


OPERATOR_TOML = """
[policy.principals.ops]
tenants = ["acme"]
[serve.tokens.ops]
token = "${CODEMODE_TEST_OPS}"
principal = "ops"
tenant = "acme"
roles = ["operator"]
[serve.tokens.audit]
token = "${CODEMODE_TEST_AUDIT}"
principal = "audit"
roles = ["operator"]
console_tenants = ["*"]
"""
"""Operator tokens on top of :data:`TOKENS_TOML` (for ``--console``): ops sees acme (its own
tenant), audit every tenant."""


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("serve"), TOKENS_TOML)


@pytest.fixture(scope="session")
def plain_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("serve-plain"))


@contextlib.contextmanager
def serving_http(workspace: Path, *args: str, stderr_copy: Path | None = None) -> Generator[str]:
    """`codemode serve --transport http` on a free port, with alice's, bob's, ops's and audit's
    tokens; its URL.

    ``stderr_copy``: a file that gets each line of the server's stderr as it comes.
    """
    env = {
        **os.environ,
        "CODEMODE_TEST_ALICE": TOKENS["alice"],
        "CODEMODE_TEST_BOB": TOKENS["bob"],
        "CODEMODE_TEST_OPS": TOKENS["ops"],
        "CODEMODE_TEST_AUDIT": TOKENS["audit"],
    }
    command = [sys.executable, "-m", "codemode.cli", "serve", "--transport", "http", "--port", "0"]
    process = subprocess.Popen(
        [*command, *args, "--config", str(workspace)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    url: list[str] = []
    lines: list[str] = []
    ready = threading.Event()

    def watch() -> None:
        assert process.stderr is not None
        copy = stderr_copy.open("w", encoding="utf-8") if stderr_copy is not None else None
        for line in process.stderr:
            lines.append(line)
            if copy is not None:
                copy.write(line)
                copy.flush()
            if line.startswith("READY ") and not url:
                url.append(line.split()[1])
                ready.set()
        ready.set()
        if copy is not None:
            copy.close()

    threading.Thread(target=watch, daemon=True).start()
    try:
        if not ready.wait(90) or not url:
            raise RuntimeError("codemode serve did not start:\n" + "".join(lines[-30:]))
        yield url[0]
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def http_server(workspace: Path) -> Iterator[str]:
    """`codemode serve --transport http` on the shared workspace."""
    with serving_http(workspace) as url:
        yield url


@pytest.fixture(scope="module")
def console_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace of its own per module: its ledger holds only that module's runs."""
    return make_workspace(tmp_path_factory.mktemp("console"), TOKENS_TOML + OPERATOR_TOML)


@pytest.fixture(scope="module")
def console_url(console_workspace: Path) -> Iterator[str]:
    """The console of a running ``codemode serve --console`` (its MCP endpoint is beside it)."""
    with serving_http(console_workspace, "--console") as url:
        yield url.removesuffix("/mcp") + "/console"
